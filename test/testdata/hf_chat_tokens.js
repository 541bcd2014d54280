// Reference token IDs of chat prompts, from the JavaScript port of Hugging
// Face's tokenizers and chat templates (@lenml/tokenizers, which follows
// transformers.js): for each conversation on stdin, the IDs of
// apply_chat_template(messages, {add_generation_prompt: true}).
//
//   node hf_chat_tokens.js MODEL_DIR < conversations.json
//
// with @lenml/tokenizers in a node_modules beside it (harness.NodeCommand);
// stdin is a JSON array of conversations (arrays of {role, content});
// stdout is a JSON array of ID arrays, one per conversation.
"use strict";
const fs = require("fs");
const path = require("path");

const [modelDir] = process.argv.slice(2);
const { TokenizerLoader } = require("@lenml/tokenizers");
const read = (name) => JSON.parse(fs.readFileSync(path.join(modelDir, name), "utf8"));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: read("tokenizer.json"),
  tokenizerConfig: read("tokenizer_config.json"),
});
const conversations = JSON.parse(fs.readFileSync(0, "utf8"));
const out = conversations.map((messages) =>
  Array.from(tok.apply_chat_template(messages, { add_generation_prompt: true, tokenize: true })));
process.stdout.write(JSON.stringify(out));
