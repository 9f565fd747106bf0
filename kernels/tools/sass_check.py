#!/usr/bin/env python3
"""Reports, per Hopper kernel of an sm_90a cubin, what ptxas made of it: instructions, R2UR
moves, and with a disassembler the wgmma (HGMMA) waits, local-memory spills and the key loop.

ptxas hides its worst choices in notes or not at all: it serialised every wgmma of a kernel
(a wait after each HGMMA) when one was in flight across a join (v22, v25), and moved the key
loop's stage counters out of uniform registers (an R2UR before each wgmma, v25). This finds
both without a GPU.

    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 \\
        -o /tmp/k.cubin kernels/cuda/attention_fwd_hopper.cu
    python3 kernels/tools/sass_check.py /tmp/k.cubin [name-substring]
    python3 kernels/tools/sass_check.py kernels/prebuilt/gllm_kernels.fatbin

R2UR is counted from the instruction words (opcode 0x2ca in the low 12 bits of an sm_90
instruction). The rest needs nvdisasm (NVDISASM or PATH): CUDA 13's toolkit here has none, but
the nvdisasm of Debian 12's non-free nvidia-cuda-toolkit (CUDA 11.8) decodes sm_90a code,
HGMMA included, when given a kernel's raw .text (-b SM90), which is how it is called here.
"""
import collections
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

R2UR = 0x2CA


def sm90_elf(data):
    """The sm_90 ELF image of a fatbin (daemon/backends/cuda/fatbin.c reads the same
    container: u32 magic, u16 version, u16 header size, u64 payload size; entries of u16 kind,
    2 for ELF, u32 header size at 4, u64 payload size at 8, u32 arch at 28)."""
    hsize, total = struct.unpack_from("<HQ", data, 6)
    e, end = hsize, hsize + total
    while e + 32 <= end:
        kind, = struct.unpack_from("<H", data, e)
        ehs, payload = struct.unpack_from("<IQ", data, e + 4)
        arch, = struct.unpack_from("<I", data, e + 28)
        if kind == 2 and arch == 90:
            return data[e + ehs:e + ehs + payload]
        e += ehs + payload
    sys.exit("no sm_90 image in the fatbin")


def text_sections(path):
    """(kernel name, code bytes) for each .text.<kernel> section of an ELF cubin, or of a
    fatbin's sm_90 image (kernels/prebuilt/gllm_kernels.fatbin)."""
    data = open(path, "rb").read()
    if data[:4] == struct.pack("<I", 0xBA55ED50):
        data = sm90_elf(data)
    if data[:4] != b"\x7fELF":
        sys.exit("%s: neither an ELF cubin nor a fatbin with one" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = secs[shstrndx][4]
    for sec in secs:
        end = data.index(b"\0", names + sec[0])
        name = data[names + sec[0]:end].decode()
        if name.startswith(".text."):
            yield name[6:], data[sec[4]:sec[4] + sec[5]]


def disassemble(nvdisasm, code):
    """[(address, text)] of raw sm_90 code, predicates kept."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        out = subprocess.run([nvdisasm, "-b", "SM90", f.name], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("nvdisasm: " + out.stderr.strip())
    ins = []
    for line in out.stdout.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    return ins


def opcode(text):
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0]


def key_loop(ins):
    """The innermost backward branch around HGMMAs and exponentials: the key loop."""
    best = None
    for addr, text in ins:
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        body = [t for a, t in ins if int(m.group(1), 16) <= a <= addr]
        if any("HGMMA" in t for t in body) and any("MUFU.EX2" in t for t in body):
            if best is None or len(body) < len(best):
                best = body
    return best


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    want = sys.argv[2] if len(sys.argv) > 2 else "hopper"
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    print("%-44s %6s %5s" % ("kernel", "instr", "R2UR") +
          (" %6s %9s %6s %6s %6s" % ("HGMMA", "waited", "spill", "loop", "loopR2U") if nvdisasm else ""))
    bad = False
    found = 0
    for name, code in sorted(text_sections(sys.argv[1])):
        if want not in name:
            continue
        found += 1
        words = [struct.unpack_from("<Q", code, i)[0] for i in range(0, len(code), 16)]
        r2ur = sum(1 for w in words if w & 0xFFF == R2UR)
        row = "%-44s %6d %5d" % (name[:44], len(words), r2ur)
        if nvdisasm:
            ins = disassemble(nvdisasm, code)
            ops = collections.Counter(opcode(t) for _, t in ins)
            hgmma = [t for _, t in ins if "HGMMA" in t]
            # An HGMMA that waits for its own result (gsb0) ends a group; every one doing so
            # means ptxas serialised them.
            waited = sum(1 for t in hgmma if "gsb0" in t)
            spill = ops["STL"] + ops["LDL"] + ops["STL.64"] + ops["LDL.64"] + sum(
                v for k, v in ops.items() if k.startswith(("STL.", "LDL.")))
            loop = key_loop(ins)
            loop_r2ur = sum(1 for t in loop or [] if opcode(t) == "R2UR")
            row += " %6d %4d/%-4d %6d %6s %6s" % (len(hgmma), waited, len(hgmma), spill,
                                                  len(loop) if loop else "-",
                                                  loop_r2ur if loop else "-")
            if hgmma and waited == len(hgmma) and len(hgmma) > 2:
                row += "  SERIALISED"
                bad = True
            if loop and loop_r2ur:
                row += "  R2UR IN KEY LOOP"
                bad = True
        print(row)
    if not nvdisasm:
        print("(no nvdisasm: R2UR only; see this file's header)")
    if not found:
        # A host executable (hp_build.sh's harness) is an ELF too, but its kernels are in a
        # compressed fatbin that this script does not unpack.
        sys.exit("%s: no kernel named *%s*; a host executable's kernels are not read: build a "
                 "cubin (this file's header)" % (sys.argv[1], want))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
