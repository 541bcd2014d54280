// Reference encoder for TestConformance: Hugging Face tokenizers (the Rust
// library, through its Node binding) encodes a corpus with a tokenizer.json.
//
//   node reference.js NODE_MODULES TOKENIZER_JSON CORPUS_JSONL
//
// CORPUS_JSONL holds one JSON string per line. The output has two lines per
// string, each the JSON array of token IDs without BOS/EOS
// (add_special_tokens=false): first every string encoded as Tokenizer.encode
// does ("special": added tokens, special ones included, are recognised),
// then every string encoded "plain": with the special tokens renamed to text
// that never occurs, so their text is tokenized like any other text — what
// warden's Encode does with user content — while every other added token
// keeps its ID. (A token not in the model vocabulary takes the next free ID
// in the order of added_tokens, so renamed tokens that were in the model
// vocabulary move to the end, where the new IDs they take shift nothing.)
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, tokenizerPath, corpusPath] = process.argv.slice(2);
const { Tokenizer } = require(path.join(nodeModules, 'tokenizers'));

const spec = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
// The post-processor only adds BOS/EOS, which encode below turns off;
// truncation and padding would change the IDs, so they must be off.
spec.truncation = null;
spec.padding = null;
const special = Tokenizer.fromString(JSON.stringify(spec));
const inVocab = (t) => Object.prototype.hasOwnProperty.call(spec.model.vocab, t.content);
const moved = spec.added_tokens.filter((t) => t.special && inVocab(t));
spec.added_tokens = spec.added_tokens.filter((t) => !(t.special && inVocab(t))).concat(moved);
spec.added_tokens.forEach((t, i) => {
  if (t.special) t.content = `\uffff\ufffe${i}\ufffe\uffff`;
});
const plain = Tokenizer.fromString(JSON.stringify(spec));

const lines = fs.readFileSync(corpusPath, 'utf8').split('\n');
if (lines[lines.length - 1] === '') lines.pop();
const corpus = lines.map((l) => JSON.parse(l));

async function encodeAll(tok) {
  const out = [];
  const batch = 5000;
  for (let i = 0; i < corpus.length; i += batch) {
    const encs = await tok.encodeBatch(corpus.slice(i, i + batch), { addSpecialTokens: false });
    for (const e of encs) out.push(JSON.stringify(e.getIds()));
  }
  return out.join('\n') + '\n';
}

async function main() {
  process.stdout.write(await encodeAll(special));
  process.stdout.write(await encodeAll(plain));
}
main().catch((err) => {
  console.error(err);
  process.exit(1);
});
