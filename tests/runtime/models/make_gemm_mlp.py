#!/usr/bin/python3
"""Writes gemm_mlp.onnx: a two-layer perceptron of Gemm ops (transB=1 with a [n] bias, then
transA=1 on a transposed input with alpha/beta and a [1, n] bias), the Gemm forms that ONNX
exports of nn.Linear use. Run with Debian's python3 (python3-onnx); the file is checked in."""
import random

import onnx
from onnx import TensorProto, helper

rng = random.Random(0)
def weight(name, shape):
    count = 1
    for d in shape:
        count *= d
    return helper.make_tensor(name, TensorProto.FLOAT, shape, [rng.uniform(-0.5, 0.5) for _ in range(count)])

nodes = [
    helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
    helper.make_node("Relu", ["h"], ["r"], name="relu"),
    helper.make_node("Transpose", ["r"], ["rt"], name="to_features_major", perm=[1, 0]),
    helper.make_node("Gemm", ["rt", "fc2.weight", "fc2.bias"], ["y"], name="fc2", transA=1, alpha=0.5, beta=2.0),
]
graph = helper.make_graph(
    nodes, "gemm_mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])],
    [weight("fc1.weight", [32, 16]), weight("fc1.bias", [32]), weight("fc2.weight", [32, 4]),
     weight("fc2.bias", [1, 4])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="partita-tests")
onnx.checker.check_model(model)
onnx.save(model, __file__.replace("make_gemm_mlp.py", "gemm_mlp.onnx"))
