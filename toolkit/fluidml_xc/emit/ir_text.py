"""An llvmlite module's IR text, the same bytes as `str(module)`, printed in about half the time (issue #27).

llvmlite prints every instruction through nested `str.format` calls, caches nothing between equal constants and
re-renders each vector constant element by element. Here the common instruction classes are printed by one
function each with the types' strings and the vector constants' references cached for the module; an instruction
of another class, or one with metadata (a loop's `llvm.loop`), is llvmlite's own `str(instruction)`.
tests/test_ir_text.py checks the bytes against llvmlite's on kernels of every kind.
"""
from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions as ins
from llvmlite.ir.values import NamedValue

_VOID = ir.VoidType
_PLAIN_LOCAL: dict[type, bool] = {}


def _plain_local(cls: type) -> bool:
    """Does `cls` print its reference as NamedValue does for a local value (`%"name"`)?"""
    return (issubclass(cls, NamedValue) and cls.name_prefix == "%"
            and getattr(cls, "_get_reference") is NamedValue._get_reference)


class _Printer:
    """The caches of one module's printing (types, values' references and vector constants by identity: alive
    while it prints)."""

    def __init__(self):
        self.types: dict[int, str] = {}
        self.refs: dict[int, str] = {}
        self.vectors: dict[tuple, str] = {}

    def ty(self, t) -> str:
        s = self.types.get(id(t))
        if s is None:
            s = self.types[id(t)] = str(t)
        return s

    def ref(self, v) -> str:
        s = self.refs.get(id(v))
        if s is None:
            s = self.refs[id(v)] = self._reference(v)
        return s

    def _reference(self, v) -> str:
        """Its reference: a local value's name quoted as llvmlite does (without its exception-driven string
        cache); an integer vector constant's (shuffle masks, splat indices) once per value."""
        cls = type(v)
        plain = _PLAIN_LOCAL.get(cls)
        if plain is None:
            plain = _PLAIN_LOCAL[cls] = _plain_local(cls)
        if plain:
            name = v._name
            if "\\" not in name and '"' not in name:
                return '%"' + name + '"'
        elif cls is ir.Constant and type(v.type) is ir.VectorType and type(v.constant) is list:
            values = [c.constant for c in v.constant if type(c) is ir.Constant and type(c.constant) is int]
            if len(values) == len(v.constant):
                key = (self.ty(v.type), *values)
                s = self.vectors.get(key)
                if s is None:
                    s = self.vectors[key] = v.get_reference()
                return s
        return v.get_reference()

    def typed(self, v) -> str:
        return self.ty(v.type) + " " + self.ref(v)

    def body(self, i) -> str | None:
        """An instruction's text after `%x = ` (None: llvmlite prints it)."""
        printer = _PRINTERS.get(type(i))
        return None if printer is None or i.metadata else printer(self, i)

    def function(self, fn: ir.Function) -> str:
        buf: list[str] = []
        fn.descr_prototype(buf)
        buf.append("{\n")
        for block in fn.blocks:
            buf.append(block._format_name() + ":\n")
            for i in block.instructions:
                text = self.body(i)
                if text is None:
                    buf.append("  " + str(i) + "\n")
                elif isinstance(i.type, _VOID):
                    buf.append("  " + text.rstrip() + "\n")
                else:
                    buf.append("  " + (self.ref(i) + " = " + text).rstrip() + "\n")
        buf.append("}\n")
        return "".join(buf)


def _plain(p: _Printer, i) -> str:
    opname = " ".join([i.opname, *i.flags]) if i.flags else i.opname
    return opname + " " + p.ty(i.type) + " " + ", ".join([p.ref(o) for o in i.operands])


def _load(p: _Printer, i) -> str:
    return "load " + p.ty(i.type) + ", " + p.typed(i.operands[0]) + ("" if i.align is None else ", align %d" % i.align)


def _store(p: _Printer, i) -> str:
    value, ptr = i.operands
    return "store " + p.typed(value) + ", " + p.typed(ptr) + ("" if i.align is None else ", align %d" % i.align)


def _gep(p: _Printer, i) -> str:
    op = "getelementptr inbounds" if i.inbounds else "getelementptr"
    return op + " " + p.ty(i.source_etype) + ", " + p.typed(i.pointer) + ", " + ", ".join([p.typed(x) for x in i.indices])


def _cast(p: _Printer, i) -> str:
    return i.opname + " " + p.typed(i.operands[0]) + " to " + p.ty(i.type)


def _select(p: _Printer, i) -> str:
    return "select " + " ".join(i.flags) + " " + ", ".join([p.typed(o) for o in i.operands])


def _compare(p: _Printer, i) -> str:
    lhs, rhs = i.operands
    return i.opname + "".join([" " + f for f in i.flags]) + " " + i.op + " " + p.typed(lhs) + ", " + p.ref(rhs)


def _operands(p: _Printer, i) -> str:
    return i.opname + " " + ", ".join([p.typed(o) for o in i.operands])


def _phi(p: _Printer, i) -> str:
    incoming = ", ".join(["[" + p.ref(v) + ", " + p.ref(b) + "]" for v, b in i.incomings])
    return "phi " + " ".join(i.flags) + " " + p.ty(i.type) + " " + incoming


def _ret(p: _Printer, i) -> str:
    return i.opname if i.return_value is None else i.opname + " " + p.typed(i.return_value)


def _alloca(p: _Printer, i) -> str:
    text = i.opname + " " + p.ty(i.allocated_type)
    if i.operands:
        text += ", " + p.typed(i.operands[0])
    return text if i.align is None else text + ", align " + str(i.align)


def _call(p: _Printer, i) -> str | None:
    fnty = i.callee.function_type
    if i.arg_attributes or i.cconv or i.tail or i.attributes or i.fastmath or fnty.var_arg:
        return None
    return "call " + p.ty(fnty.return_type) + " " + i.callee.get_reference() + "(" + ", ".join([p.typed(a) for a in i.args]) + ")"


_PRINTERS = {ir.Instruction: _plain, ins.LoadInstr: _load, ins.StoreInstr: _store, ins.GEPInstr: _gep,
             ins.CastInstr: _cast, ins.SelectInstr: _select, ins.ICMPInstr: _compare, ins.FCMPInstr: _compare,
             ins.ExtractElement: _operands, ins.InsertElement: _operands, ins.ShuffleVector: _operands,
             ins.Branch: _operands, ins.ConditionalBranch: _operands, ins.PhiInstr: _phi, ins.Ret: _ret,
             ins.AllocaInstr: _alloca, ins.CallInstr: _call}


def module_text(module: ir.Module) -> str:
    """`str(module)`'s bytes (llvmlite 0.50's Module.__repr__), faster."""
    p = _Printer()
    lines = [f'; ModuleID = "{module.name}"', f'target triple = "{module.triple}"',
             f'target datalayout = "{module.data_layout}"', ""]
    lines += [t.get_declaration() for t in module.get_identified_types().values()]
    lines += [p.function(v) if type(v) is ir.Function and v.blocks else str(v) for v in module.globals.values()]
    lines += module._get_metadata_lines()
    return "\n".join(lines)
