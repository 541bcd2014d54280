package controlpb

// Size limits of the ModelAssets exchange. The gateway fetches a worker's
// tokenizer files in one ModelAssetsResponse; gRPC's default 4 MiB receive
// limit is far below real tokenizers (Llama 3's tokenizer.json is 9 MB,
// Qwen's and Gemma's 10-35 MB), so both ends use these explicit limits.
const (
	// MaxAssetFileBytes bounds one model asset file (tokenizer.json,
	// tokenizer_config.json, generation_config.json, chat_template.jinja).
	// A worker whose files exceed it refuses to start.
	MaxAssetFileBytes = 64 << 20
	// MaxAssetsBytes bounds all of a worker's asset files together; a
	// worker refuses to start above it.
	MaxAssetsBytes = 96 << 20
	// MaxAssetsMessageBytes is the gateway's receive limit for one
	// ModelAssetsResponse: MaxAssetsBytes plus room for the message's
	// framing and its short fields.
	MaxAssetsMessageBytes = MaxAssetsBytes + 1<<20
)
