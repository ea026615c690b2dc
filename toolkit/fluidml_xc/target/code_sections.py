"""Machine code that a module carries as data (kernels/scalar_tile.py, kernels/depthwise_tile.py: RISC-V routines as
words in a `.text.*` section) marked executable in the object: LLVM gives an explicitly named section of constant
data the flags of read-only data (SHF_ALLOC), and only the final link's merge into `.text` made it executable."""
from __future__ import annotations

import struct

SHF_EXECINSTR = 0x4
SHF_WRITE = 0x1
MARK = b".text.fxc_"
"""The prefix of the sections that hold such routines."""


def executable_code_sections(obj: bytes) -> bytes:
    """`obj` (an ELF relocatable) with every allocated, read-only section named MARK... flagged SHF_EXECINSTR;
    unchanged when it has none."""
    if MARK not in obj or obj[:4] != b"\x7fELF":
        return obj
    wide, order = obj[4] == 2, "<" if obj[5] == 1 else ">"
    shoff, shentsize, shnum, shstrndx = (struct.unpack_from(order + "Q", obj, 0x28)[0] if wide else struct.unpack_from(order + "I", obj, 0x20)[0],
                                         *struct.unpack_from(order + "HHH", obj, 0x3A if wide else 0x2E))
    flags_at, flags_fmt = (8, "Q") if wide else (8, "I")
    names_offset = struct.unpack_from(order + ("Q" if wide else "I"), obj, shoff + shstrndx * shentsize + (0x18 if wide else 0x10))[0]
    out = bytearray(obj)
    for i in range(shnum):
        header = shoff + i * shentsize
        name_at = names_offset + struct.unpack_from(order + "I", obj, header)[0]
        flags = struct.unpack_from(order + flags_fmt, obj, header + flags_at)[0]
        if obj.startswith(MARK, name_at) and flags & 0x2 and not flags & SHF_WRITE:
            struct.pack_into(order + flags_fmt, out, header + flags_at, flags | SHF_EXECINSTR)
    return bytes(out)
