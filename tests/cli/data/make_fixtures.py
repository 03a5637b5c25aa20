#!/usr/bin/env python3
"""Writes the tiny ONNX files the CLI golden tests read (no onnx package needed: the protobuf
wire format is written by hand). Run from this directory: python3 make_fixtures.py"""


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint((num << 3) | 2) + varint(len(value)) + value


FLOAT = 1


def value_info(name, shape, elem=FLOAT):
    dims = b""
    for d in shape or ():
        if d is None:
            dims += field(1, b"")  # an unnamed dynamic dimension
        elif isinstance(d, str):
            dims += field(1, field(2, d))
        else:
            dims += field(1, field(1, d))
    tensor = field(1, elem) + (field(2, dims) if shape is not None else b"")
    return field(1, name) + field(2, field(1, tensor))


def initializer(name, dims):
    n = 1
    for d in dims:
        n *= d
    return b"".join(field(1, d) for d in dims) + field(2, FLOAT) + field(8, name) + field(9, b"\0" * (4 * n))


def node(op, inputs, outputs, name, domain=""):
    body = b"".join(field(1, i) for i in inputs) + b"".join(field(2, o) for o in outputs)
    body += field(3, name) + field(4, op)
    if domain:
        body += field(7, domain)
    return body


def model(nodes, inits, inputs, outputs, value_infos=(), domains=()):
    g = b"".join(field(1, n) for n in nodes) + field(2, "fixture")
    g += b"".join(field(5, i) for i in inits)
    g += b"".join(field(11, v) for v in inputs) + b"".join(field(12, v) for v in outputs)
    g += b"".join(field(13, v) for v in value_infos)
    m = field(1, 8) + field(2, "partita-fixtures")
    m += field(8, field(1, "") + field(2, 17))
    for d in domains:
        m += field(8, field(1, d) + field(2, 1))
    return m + field(7, g)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# X[?, 4] (axis 0 unnamed) -> MatMul W[4, 2] -> Y
write("unnamed_batch.onnx",
      model([node("MatMul", ["X", "W"], ["Y"], "fc")], [initializer("W", [4, 2])],
            [value_info("X", [None, 4])], [value_info("Y", None)]))

# X[2, 4] -> MatMul W -> H -> com.microsoft.BiasGelu -> G -> Relu -> Y; G's shape in value_info
def foreign(with_value_info):
    return model([node("MatMul", ["X", "W"], ["H"], "fc"),
                  node("BiasGelu", ["H", "B"], ["G"], "gelu", "com.microsoft"),
                  node("Relu", ["G"], ["Y"], "act")],
                 [initializer("W", [4, 8]), initializer("B", [8])],
                 [value_info("X", [2, 4])], [value_info("Y", None)],
                 [value_info("G", [2, 8])] if with_value_info else [], ["com.microsoft"])


write("foreign_op.onnx", foreign(True))
write("foreign_op_no_shape.onnx", foreign(False))
