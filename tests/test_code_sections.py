"""Routines carried as words in a `.text.fxc_*` section (kernels/scalar_tile.py, kernels/depthwise_tile.py) are
executable in the object LLVM writes (target/code_sections.py), 64- and 32-bit ELF; other sections and objects
without such a section are left as they are."""
from __future__ import annotations

import io

import llvmlite.binding as llvm
import pytest
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from llvmlite import ir

from fluidml_xc.target.code_sections import executable_code_sections
from fluidml_xc.target.machine import initialize_llvm


def _object(triple: str, section: str | None) -> bytes:
    initialize_llvm()
    module = ir.Module()
    module.triple = triple
    words = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(32), 2), "routine")
    words.initializer, words.global_constant = ir.Constant(words.value_type, [0x13, 0x8067]), True
    if section:
        words.section = section
    table = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(32), 1), "table")
    table.initializer, table.global_constant, table.section = ir.Constant(table.value_type, [7]), True, ".rodata.fxc_table"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    b.call(b.bitcast(words, fn.type), [])
    b.ret_void()
    return llvm.Target.from_triple(triple).create_target_machine(reloc="pic").emit_object(llvm.parse_assembly(str(module)))


def _flags(obj: bytes) -> dict[str, int]:
    return {s.name: s["sh_flags"] for s in ELFFile(io.BytesIO(obj)).iter_sections() if s.name}


@pytest.mark.parametrize("triple", ["riscv64-unknown-linux-gnu", "armv7-unknown-linux-gnueabihf"])
def test_routine_sections_become_executable(triple):
    obj = _object(triple, ".text.fxc_scalar_tile")
    before, after = _flags(obj), _flags(executable_code_sections(obj))
    assert not before[".text.fxc_scalar_tile"] & SH_FLAGS.SHF_EXECINSTR  # what LLVM writes
    assert after[".text.fxc_scalar_tile"] == SH_FLAGS.SHF_ALLOC | SH_FLAGS.SHF_EXECINSTR
    assert {k: v for k, v in after.items() if k != ".text.fxc_scalar_tile"} == {k: v for k, v in before.items() if k != ".text.fxc_scalar_tile"}


def test_objects_without_routines_are_unchanged():
    obj = _object("riscv64-unknown-linux-gnu", None)
    assert executable_code_sections(obj) is obj
