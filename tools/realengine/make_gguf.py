#!/usr/bin/env python3
"""Writes a tiny llama-architecture GGUF model with seeded random weights.

No weights can be downloaded where llmgate is tested, so this makes a model
that llama.cpp loads and runs like any other: a llama graph (RMS norm,
rotary attention with grouped KV heads, SwiGLU feed-forward), Q8_0 weights,
and a SentencePiece-style ("llama") vocabulary with byte fallback, so any
UTF-8 prompt tokenizes. Its answers are nonsense, but every token costs a
real prefill or decode step on the CPU.

The output layer gives the special and byte tokens all-zero rows, so greedy
decoding only ever picks printable text tokens (no end-of-sequence: a
request ends at its max_tokens, and no partial UTF-8 sequence is streamed).

The same arguments give the same file, byte for byte. Standard library only.

  tools/realengine/make_gguf.py OUT.gguf [--layers 4] [--embd 512] [--ff 1536]
                                [--heads 8] [--kv-heads 4] [--ctx 4096] [--seed 1]

GGUF layout (version 3, little-endian): magic, version, tensor count,
metadata count; metadata key/value pairs; tensor infos (name, dims with the
fastest-varying first, type, offset into the data); padding to the
alignment (32); the tensors' data, each at an aligned offset.
"""

import argparse
import math
import os
import random
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGN = 32

# metadata value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# tensor types
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
TYPES = {"q8_0": GGML_Q8_0, "f16": GGML_F16, "f32": GGML_F32}
FILE_TYPES = {GGML_F32: 0, GGML_F16: 1, GGML_Q8_0: 7}  # general.file_type (llama_ftype)
Q8_BLOCK = 32  # weights per Q8_0 block: an f16 scale, then 32 int8

# token types (llama.cpp's llama_token_type)
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_BYTE = 1, 2, 3, 6

SPACE = "\u2581"  # SentencePiece's visible space

WORDS = """the of and to in is it you that he was for on are with as his they be at one
have this from or had by hot word but what some we can out other were all there when up use
your how said an each she which do their time if will way about many then them write would
like so these her long make thing see him two has look more day could go come did number
sound no most people my over know water than call first who may down side been now find any
new work part take get place made live where after back little only round man year came show
every good me give our under name very through just form sentence great think say help low
line differ turn cause much mean before move right boy old too same tell does set three want
air well also play small end put home read hand port large spell add even land here must big
high such follow act why ask men change went light kind off need house picture try us again
animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye
never last let thought city tree cross farm hard start might story saw far sea draw left late
run while press close night real life few north open seem together next white children begin
got walk example ease paper group always music those both mark often letter until mile river
car feet care second book carry took science eat room friend began idea fish mountain stop
once base hear horse cut sure watch color face wood main enough plain girl usual young ready
above ever red list though feel talk bird soon body dog family direct pose leave song measure
door product black short numeral class wind question happen complete ship area half rock order
fire south problem piece told knew pass since top whole king space heard best hour better true
during hundred five remember step early hold west ground interest reach fast verb sing listen
six table travel less morning ten simple several vowel toward war lay against pattern slow
center love person money serve appear road map rain rule govern pull cold notice voice unit
power town fine certain fly fall lead cry dark machine note wait plan figure star box noun
field rest correct able pound done beauty drive stood contain front teach week final gave
green oh quick develop ocean warm free minute strong special mind behind clear tail produce
fact street inch multiply nothing course stay wheel full force blue object decide surface deep
moon island foot system busy test record boat common gold possible plane stead dry wonder laugh
thousand ago ran check game shape equate miss brought heat snow tire bring yes distant fill
east paint language among grand ball yet wave drop heart am present heavy dance engine position
arm wide sail material size vary settle speak weight general ice matter circle pair include
divide syllable felt perhaps pick sudden count square reason length represent art subject
region energy hunt probable bed brother egg ride cell believe fraction forest sit race window
store summer train sleep prove lone leg exercise wall catch mount wish sky board joy winter sat
written wild instrument kept glass grass cow job edge sign visit past soft fun bright gas
weather month million bear finish happy hope flower clothe strange gone jump baby eight village
meet root buy raise solve metal whether push seven paragraph third shall held hair describe cook
floor either result burn hill safe cat century consider type law bit coast copy phrase silent
tall sand soil roll temperature finger industry value fight lie beat excite natural view sense
ear else quite broke case middle kill son lake moment scale loud spring observe child straight
consonant nation dictionary milk speed method organ pay age section dress cloud surprise quiet
stone tiny climb cool design poor lot experiment bottom key iron single stick flat twenty skin
smile crease hole trade melody trip office receive row mouth exact symbol die least trouble
shout except wrote seed tone join suggest clean break lady yard rise bad blow oil blood touch
grew cent mix team wire cost lost brown wear garden equal sent choose fell fit flow fair bank
collect save control decimal gentle woman captain practice separate difficult doctor please
protect noon whose locate ring character insect caught period indicate radio spoke atom human
history effect electric expect crop modern element hit student corner party supply bone rail
imagine provide agree thus capital chair danger fruit rich thick soldier process operate guess
necessary sharp wing create neighbor wash bat rather crowd corn compare poem string bell depend
meat rub tube famous dollar stream fear sight thin triangle planet hurry chief colony clock mine
tie enter major fresh search send yellow gun allow print dead spot desert suit current lift rose
continue block chart hat sell success company subtract event particular deal swim term opposite
wife shoe shoulder spread arrange camp invent cotton born determine quart nine truck noise level
chance gather shop stretch throw shine property column molecule select wrong gray repeat require
broad prepare salt nose plural anger claim continent oxygen sugar death pretty skill women season
solution magnet silver thank branch match suffix especially fig afraid huge sister steel discuss
forward similar guide experience score apple bought led pitch coat mass card band rope slip win
dream evening condition feed tool total basic smell valley nor double seat arrive master track
parent shore division sheet substance favor connect post spend chord fat glad original share
station dad bread charge proper bar offer segment slave duck instant market degree populate
chick dear enemy reply drink occur support speech nature range steam motion path liquid log
meant quotient teeth shell neck
model answers routing tokens replica queues shrink request streams events client gateway engine
cache prefix shared latency budget system prompt group token stream queue""".split()


def vocabulary():
    """(tokens, scores, types): specials, the 256 byte tokens, then text
    pieces. A SentencePiece tokenizer merges adjacent pieces only into
    pieces that exist, so every prefix of a word piece is in the vocabulary
    too. Scores rank longer pieces first (they are log-probabilities in a
    real model)."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TOK_UNKNOWN, TOK_CONTROL, TOK_CONTROL]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(TOK_BYTE)
    text = [SPACE] + [chr(c) for c in range(33, 127)]
    seen = set(text)
    for w in WORDS:
        piece = SPACE + w
        for i in range(2, len(piece) + 1):
            p = piece[:i]
            if p not in seen:
                seen.add(p)
                text.append(p)
    tokens += text
    types += [TOK_NORMAL] * len(text)
    scores = [0.0] * 259 + [float(len(t)) for t in text]
    return tokens, scores, types


class Writer:
    def __init__(self):
        self.meta = []
        self.tensors = []  # (name, dims, type, bytes)

    # ---- metadata ---------------------------------------------------------

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def kv(self, key, vtype, value):
        self.meta.append(self._str(key) + struct.pack("<I", vtype) + self._value(vtype, value))

    def kv_array(self, key, etype, values):
        body = b"".join(self._value(etype, v) for v in values)
        self.meta.append(self._str(key) + struct.pack("<IIQ", T_ARRAY, etype, len(values)) + body)

    def _value(self, vtype, v):
        if vtype == T_UINT32:
            return struct.pack("<I", v)
        if vtype == T_INT32:
            return struct.pack("<i", v)
        if vtype == T_FLOAT32:
            return struct.pack("<f", v)
        if vtype == T_BOOL:
            return struct.pack("<B", 1 if v else 0)
        if vtype == T_STRING:
            return self._str(v)
        raise ValueError(vtype)

    # ---- tensors ----------------------------------------------------------

    def tensor(self, name, dims, ttype, data):
        self.tensors.append((name, dims, ttype, data))

    def write(self, path):
        infos = []
        offset = 0
        for name, dims, ttype, data in self.tensors:
            infos.append(self._str(name) + struct.pack("<I", len(dims))
                         + b"".join(struct.pack("<Q", d) for d in dims)
                         + struct.pack("<IQ", ttype, offset))
            offset += len(data) + (-len(data)) % ALIGN
        head = (GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.meta))
                + b"".join(self.meta) + b"".join(infos))
        tmp = "%s.tmp%d" % (path, os.getpid())
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(b"\0" * ((-len(head)) % ALIGN))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * ((-len(data)) % ALIGN))
        os.replace(tmp, path)  # atomic: replicas started together may race to make it


def matrix(rng, rows, cols, gain, wtype, zero_rows=()):
    """A rows x cols weight matrix of uniform random int8 values times one
    scale, chosen so that each output of a product with a unit-RMS input has
    standard deviation `gain` (the int8 values' is ~73.9). The same values
    are stored exactly in any type: Q8_0 (blocks of an f16 scale and 32
    int8), F16 or F32, so the types are one model at three speeds."""
    assert cols % Q8_BLOCK == 0
    n = rows * cols
    scale = struct.pack("<e", gain / (73.9 * math.sqrt(cols)))
    d = struct.unpack("<e", scale)[0]
    q = bytearray(rng.randbytes(n))
    for r in zero_rows:
        q[r * cols:(r + 1) * cols] = bytes(cols)
    if wtype == GGML_Q8_0:
        nblocks = n // Q8_BLOCK
        stride = Q8_BLOCK + 2
        out = bytearray(nblocks * stride)
        out[0::stride] = scale[0:1] * nblocks
        out[1::stride] = scale[1:2] * nblocks
        for j in range(Q8_BLOCK):
            out[2 + j::stride] = q[j::Q8_BLOCK]
        for r in zero_rows:  # a zero scale too: the row is exactly zero
            row = cols // Q8_BLOCK * stride
            out[r * row:(r + 1) * row] = bytes(row)
        return bytes(out)
    # F16/F32: every weight is d * (one of 256 int8 values); map each byte of
    # q to each byte of its value's encoding (bytes.translate runs in C)
    fmt, width = ("<e", 2) if wtype == GGML_F16 else ("<f", 4)
    enc = [struct.pack(fmt, d * (b - 256 if b > 127 else b)) for b in range(256)]
    out = bytearray(n * width)
    for k in range(width):
        out[k::width] = q.translate(bytes(e[k] for e in enc))
    return bytes(out)


def ones_f32(n):
    return struct.pack("<f", 1.0) * n


def build(args):
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    head_dim = args.embd // args.heads
    n_embd_kv = head_dim * args.kv_heads
    rng = random.Random(args.seed)
    wt = TYPES[args.type]
    w = Writer()
    w.kv("general.architecture", T_STRING, "llama")
    w.kv("general.name", T_STRING, args.name)
    w.kv("general.file_type", T_UINT32, FILE_TYPES[wt])
    w.kv("llama.context_length", T_UINT32, args.ctx)
    w.kv("llama.embedding_length", T_UINT32, args.embd)
    w.kv("llama.block_count", T_UINT32, args.layers)
    w.kv("llama.feed_forward_length", T_UINT32, args.ff)
    w.kv("llama.attention.head_count", T_UINT32, args.heads)
    w.kv("llama.attention.head_count_kv", T_UINT32, args.kv_heads)
    w.kv("llama.rope.dimension_count", T_UINT32, head_dim)
    w.kv("llama.rope.freq_base", T_FLOAT32, 10000.0)
    w.kv("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-5)
    w.kv("llama.vocab_size", T_UINT32, n_vocab)
    w.kv("tokenizer.ggml.model", T_STRING, "llama")
    w.kv_array("tokenizer.ggml.tokens", T_STRING, tokens)
    w.kv_array("tokenizer.ggml.scores", T_FLOAT32, scores)
    w.kv_array("tokenizer.ggml.token_type", T_INT32, types)
    w.kv("tokenizer.ggml.unknown_token_id", T_UINT32, 0)
    w.kv("tokenizer.ggml.bos_token_id", T_UINT32, 1)
    w.kv("tokenizer.ggml.eos_token_id", T_UINT32, 2)
    w.kv("tokenizer.ggml.add_bos_token", T_BOOL, True)
    w.kv("tokenizer.ggml.add_eos_token", T_BOOL, False)

    not_text = range(259)  # specials and bytes: never an argmax
    w.tensor("token_embd.weight", [args.embd, n_vocab], wt,
             matrix(rng, n_vocab, args.embd, 1.0, wt))
    for i in range(args.layers):
        p = "blk.%d." % i
        w.tensor(p + "attn_norm.weight", [args.embd], GGML_F32, ones_f32(args.embd))
        w.tensor(p + "attn_q.weight", [args.embd, args.embd], wt,
                 matrix(rng, args.embd, args.embd, 1.0, wt))
        w.tensor(p + "attn_k.weight", [args.embd, n_embd_kv], wt,
                 matrix(rng, n_embd_kv, args.embd, 1.0, wt))
        w.tensor(p + "attn_v.weight", [args.embd, n_embd_kv], wt,
                 matrix(rng, n_embd_kv, args.embd, 1.0, wt))
        w.tensor(p + "attn_output.weight", [args.embd, args.embd], wt,
                 matrix(rng, args.embd, args.embd, 0.5, wt))
        w.tensor(p + "ffn_norm.weight", [args.embd], GGML_F32, ones_f32(args.embd))
        w.tensor(p + "ffn_gate.weight", [args.embd, args.ff], wt,
                 matrix(rng, args.ff, args.embd, 1.0, wt))
        w.tensor(p + "ffn_up.weight", [args.embd, args.ff], wt,
                 matrix(rng, args.ff, args.embd, 1.0, wt))
        w.tensor(p + "ffn_down.weight", [args.ff, args.embd], wt,
                 matrix(rng, args.embd, args.ff, 0.5, wt))
    w.tensor("output_norm.weight", [args.embd], GGML_F32, ones_f32(args.embd))
    w.tensor("output.weight", [args.embd, n_vocab], wt,
             matrix(rng, n_vocab, args.embd, 4.0, wt, zero_rows=not_text))
    return w


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the .gguf file to write")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=512, help="embedding width (a multiple of 32)")
    ap.add_argument("--ff", type=int, default=1536, help="feed-forward width (a multiple of 32)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=4096, help="trained context length")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--type", choices=sorted(TYPES), default="q8_0",
                    help="weight type: the same weights in each, at different speeds")
    ap.add_argument("--name", default="tiny-random-llama")
    a = ap.parse_args(argv)
    if a.embd % 32 or a.ff % 32 or a.embd % a.heads or a.heads % a.kv_heads:
        ap.error("--embd and --ff must be multiples of 32, --embd of --heads, "
                 "--heads of --kv-heads")
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    build(args).write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
