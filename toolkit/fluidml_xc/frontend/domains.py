"""Opset versions per domain: a node's schema, shape inference and lowering are looked up at the version its
own domain is imported at (ai.onnx.ml 1 beside ai.onnx 21 in skl2onnx exports), never the default domain's."""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from ..ir import is_onnx_domain


@dataclass(frozen=True)
class Opsets:
    """The model's opset_import as domain -> version ("" for the default domain, however it is spelled)."""

    versions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_model(cls, model: onnx.ModelProto) -> "Opsets":
        versions: dict[str, int] = {}
        for entry in model.opset_import:
            versions.setdefault("" if is_onnx_domain(entry.domain) else entry.domain, entry.version)
        return cls(versions)

    @property
    def default(self) -> int:
        """The default domain's version; 1 when the model imports none (as ONNX reads such a model)."""
        return self.versions.get("", 1)

    def version(self, domain: str) -> int:
        """`domain`'s imported version; for a domain the model does not import, the newest this onnx knows
        (1 for a domain it does not know)."""
        domain = "" if is_onnx_domain(domain) else domain
        if domain in self.versions:
            return self.versions[domain]
        if domain == "":
            return self.default
        return onnx.defs.C.schema_version_map().get(domain, (1, 1))[1]
