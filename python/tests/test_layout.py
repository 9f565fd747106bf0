"""The ctypes structs match include/gllm/gllm.h: sizes and every field's offset, as the
system's C compiler sees them."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from gllm import _lib, errors

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.environ.get("GLLM_INCLUDE_DIR") or os.path.join(HERE, "..", "..", "include")


def _compiler():
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = _compiler()
    if cc is None:
        pytest.skip("no C compiler: struct layouts not checked")
    if not os.path.exists(os.path.join(INCLUDE, "gllm", "gllm.h")):
        pytest.skip(f"no gllm/gllm.h under {INCLUDE} (set GLLM_INCLUDE_DIR)")
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"gllm/gllm.h\"",
             "int main(void) {"]
    for cname, st in _lib.STRUCTS.items():
        lines.append(f'printf("{cname} . %zu %zu\\n", sizeof({cname}), _Alignof({cname}));')
        for fname, _ in st._fields_:
            lines.append(f'printf("{cname} {fname} %zu %zu\\n", offsetof({cname}, {fname}), '
                         f'sizeof((({cname} *)0)->{fname}));')
    lines += ["return 0;", "}"]
    d = tmp_path_factory.mktemp("layout")
    src, exe = d / "layout.c", d / "layout"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=gnu11", "-Wall", "-Werror", "-I", INCLUDE, "-o", str(exe),
                    str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in out.splitlines():
        s, f, a, b = line.split()
        table[(s, f)] = (int(a), int(b))
    return table


@pytest.mark.parametrize("cname", sorted(_lib.STRUCTS))
def test_struct_layout(c_layout, cname):
    st = _lib.STRUCTS[cname]
    size, align = c_layout[(cname, ".")]
    assert ctypes.sizeof(st) == size, f"sizeof({cname})"
    assert ctypes.alignment(st) == align, f"_Alignof({cname})"
    for fname, ftype in st._fields_:
        off, fsize = c_layout[(cname, fname)]
        assert getattr(st, fname).offset == off, f"offsetof({cname}, {fname})"
        assert ctypes.sizeof(ftype) == fsize, f"sizeof({cname}.{fname})"


def _header_constants(name):
    with open(os.path.join(INCLUDE, "gllm", name)) as f:
        return f.read()


def test_error_codes_match_header():
    text = _header_constants("errors.h")
    header = {m.group(1): int(m.group(2))
              for m in re.finditer(r"X\((\w+),\s*(-\d+),", text)}
    assert header, "no codes parsed from errors.h"
    assert errors.CODES == header
    lib = _lib.lib()
    for name, code in header.items():
        assert _lib.text(lib.gllm_error_name(code)) == "GLLM_E" + name
        assert issubclass(errors.error_class(code), errors.Error)


def test_constants_match_header():
    text = _header_constants("gllm.h")

    def define(name):
        m = re.search(rf"#define {name}\s+\(?(\d+)(?:u << (\d+)\))?", text)
        assert m, name
        return int(m.group(1), 0) << int(m.group(2) or 0)
    assert define("GLLM_MAX_RANK") == _lib.MAX_RANK
    assert define("GLLM_ATTN_CAUSAL") == _lib.ATTN_CAUSAL
    assert define("GLLM_ATTN_SCALE") == _lib.ATTN_SCALE
    assert define("GLLM_ATTN_LSE") == _lib.ATTN_LSE
    assert define("GLLM_ATTN_WINDOW") == _lib.ATTN_WINDOW
    for name in ("WINDOW", "CHUNK", "SOFT_CAP", "ALIBI", "SINKS", "HEAD_DIM_V"):
        assert define("GLLM_VARIANT_" + name) == getattr(_lib, "VARIANT_" + name), name
    assert define("GLLM_MAX_MODE_HEAD_DIMS") == _lib.MAX_MODE_HEAD_DIMS
    assert define("GLLM_MODE_COUNT") == _lib.MODE_COUNT
    for name, value in (("GLLM_DTYPE_F32", 0), ("GLLM_DTYPE_F16", 1), ("GLLM_DTYPE_BF16", 2),
                        ("GLLM_DTYPE_I32", 3), ("GLLM_MEMORY_ARENA", _lib.MEMORY_ARENA),
                        ("GLLM_MEMORY_DEVICE", _lib.MEMORY_DEVICE),
                        ("GLLM_MEMORY_SHARED", _lib.MEMORY_SHARED),
                        ("GLLM_MODE_DENSE", _lib.MODE_DENSE),
                        ("GLLM_MODE_DECODE", _lib.MODE_DECODE),
                        ("GLLM_MODE_PREFILL", _lib.MODE_PREFILL)):
        assert re.search(rf"\b{name} = {value}\b", text), name
