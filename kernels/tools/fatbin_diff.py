#!/usr/bin/env python3
"""Compares two fatbins image by image, to show that a change of kernels/cuda left the generated
code alone: each machine-code (ELF) image section by section (.text.<kernel> is a kernel's
code, byte for byte what cuobjdump --dump-sass decodes), and the PTX text once decompressed
(the zstd tool),
with nvcc's hash of the source file's path in the anonymous namespace's name set aside (the
same sources built in two folders differ there and nowhere else).

    python3 kernels/tools/fatbin_diff.py OLD.fatbin NEW.fatbin

Exit 0 when every image's code is identical (ELF .text sections, and PTX up to the path hash),
1 otherwise; the other sections' differences are listed either way.
"""
import re
import struct
import subprocess
import sys

ELF, PTX = 2, 1


def entries(data):
    """(kind, arch, header, payload) for each entry of a fatbin (daemon/backends/cuda/fatbin.c
    reads the same container)."""
    magic, hsize, total = struct.unpack_from("<I2xHQ", data, 0)
    if magic != 0xBA55ED50:
        sys.exit("not a fatbin")
    e, end, out = hsize, hsize + total, []
    while e + 32 <= end:
        kind, = struct.unpack_from("<H", data, e)
        ehs, payload = struct.unpack_from("<IQ", data, e + 4)
        arch, = struct.unpack_from("<I", data, e + 28)
        out.append((kind, arch, data[e:e + ehs], data[e + ehs:e + ehs + payload]))
        e += ehs + payload
    return out


def sections(elf):
    """{name: (type, bytes)} of an ELF64 little-endian image."""
    shoff, = struct.unpack_from("<Q", elf, 40)
    shnum, shstrndx = struct.unpack_from("<HH", elf, 60)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + 64 * i) for i in range(shnum)]
    strtab = hdrs[shstrndx]
    names = elf[strtab[4]:strtab[4] + strtab[5]]
    out = {}
    for h in hdrs:
        name = names[h[0]:names.index(b"\0", h[0])].decode()
        body = b"" if h[1] == 8 else elf[h[4]:h[4] + h[5]]          # SHT_NOBITS: no bytes
        out[name] = (h[1], body)
    return out


def ptx_text(header, payload):
    """The PTX of an entry, decompressed with the zstd tool when nvcc compressed it (a zstd
    frame of the length at byte 16 of the entry's header)."""
    if payload[:4] == b"\x28\xb5\x2f\xfd":
        size, = struct.unpack_from("<I", header, 16)
        payload = subprocess.run(["zstd", "-dcq"], input=payload[:size], check=True,
                                 stdout=subprocess.PIPE).stdout
    return payload.rstrip(b"\0").decode("latin-1")


PATH_HASH = re.compile(r"_(INTERNAL|GLOBAL__N_)_[0-9a-f]{8}_")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = (entries(open(p, "rb").read()) for p in sys.argv[1:])
    if [(k, a) for k, a, _, _ in old] != [(k, a) for k, a, _, _ in new]:
        print("the images differ: %s against %s" % ([(k, a) for k, a, _, _ in old],
                                                    [(k, a) for k, a, _, _ in new]))
        return 1
    same = True
    for (kind, arch, ho, po), (_, _, hn, pn) in zip(old, new):
        what = ("sm_%d" if kind == ELF else "compute_%d") % arch
        if po == pn and ho == hn:
            print("%-10s identical bytes (%d)" % (what, len(po)))
            continue
        if kind == PTX:
            to, tn = ptx_text(ho, po), ptx_text(hn, pn)
            if to == tn:
                print("%-10s PTX identical (compressed bytes differ)" % what)
            elif PATH_HASH.sub("_H_", to) == PATH_HASH.sub("_H_", tn):
                print("%-10s PTX identical but for the path hash in %d names (%d bytes of text)"
                      % (what, len(PATH_HASH.findall(to)), len(to)))
            else:
                print("%-10s PTX DIFFERS" % what)
                same = False
            continue
        so, sn = sections(po), sections(pn)
        code = [n for n in so if n.startswith(".text.")]
        diff_code = [n for n in code if so[n] != sn.get(n)] + \
                    [n for n in sn if n.startswith(".text.") and n not in so]
        other = sorted(n for n in set(so) | set(sn)
                       if not n.startswith(".text.") and so.get(n) != sn.get(n))
        print("%-10s %d kernels' code %s; other sections differing: %s"
              % (what, len(code), "identical" if not diff_code else "DIFFERS in " +
                 ", ".join(diff_code), ", ".join(other) or "none"))
        same &= not diff_code
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
