#!/usr/bin/python3
"""Writes tiny_cnn.onnx: a small residual CNN with every window-op form partita-run's CNN kernels
handle: a biased Conv, BatchNormalization, MaxPool with pads and with ceil_mode, a basic residual
block (Conv-BN-Relu-Conv-BN, Add, Relu), a grouped strided Conv (group 4), a depthwise dilated Conv,
an AveragePool counting its pads, GlobalAveragePool, Flatten and a Gemm classifier.
The batch is the symbolic dimension 'batch' (partita plan --batch). Run with Debian's python3 (python3-onnx); the file is checked in."""
import random

import onnx
from onnx import TensorProto, helper

rng = random.Random(0)
initializers = []


def weight(name, shape):
    count = 1
    for d in shape:
        count *= d
    initializers.append(
        helper.make_tensor(name, TensorProto.FLOAT, shape, [rng.uniform(-0.5, 0.5) for _ in range(count)]))
    return name


def bn(name, x, channels):
    inputs = [x, weight(name + ".weight", [channels]), weight(name + ".bias", [channels]),
              weight(name + ".running_mean", [channels]), weight(name + ".running_var", [channels])]
    return helper.make_node("BatchNormalization", inputs, [name], name=name, epsilon=1e-5)


nodes = [
    helper.make_node("Conv", ["x", weight("conv1.weight", [8, 3, 3, 3]), weight("conv1.bias", [8])], ["conv1"],
                     name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    bn("bn1", "conv1", 8),
    helper.make_node("Relu", ["bn1"], ["relu1"], name="relu1"),
    helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1]),
    # A basic residual block.
    helper.make_node("Conv", ["pool1", weight("block.conv1.weight", [8, 8, 3, 3])], ["block.conv1"],
                     name="block.conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    bn("block.bn1", "block.conv1", 8),
    helper.make_node("Relu", ["block.bn1"], ["block.relu1"], name="block.relu1"),
    helper.make_node("Conv", ["block.relu1", weight("block.conv2.weight", [8, 8, 3, 3])], ["block.conv2"],
                     name="block.conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    bn("block.bn2", "block.conv2", 8),
    helper.make_node("Add", ["block.bn2", "pool1"], ["block.add"], name="block.add"),
    helper.make_node("Relu", ["block.add"], ["block.relu2"], name="block.relu2"),
    # Grouped, strided; then depthwise, dilated.
    helper.make_node("Conv", ["block.relu2", weight("grouped.weight", [16, 2, 3, 3]), weight("grouped.bias", [16])],
                     ["grouped"], name="grouped", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], group=4),
    bn("bn2", "grouped", 16),
    helper.make_node("Relu", ["bn2"], ["relu2"], name="relu2"),
    helper.make_node("Conv", ["relu2", weight("depthwise.weight", [16, 1, 3, 3])], ["depthwise"], name="depthwise",
                     kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2], group=16),
    helper.make_node("MaxPool", ["depthwise"], ["pool2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2],
                     ceil_mode=1),
    helper.make_node("AveragePool", ["pool2"], ["pool3"], name="pool3", kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                     count_include_pad=1),
    helper.make_node("GlobalAveragePool", ["pool3"], ["gap"], name="gap"),
    helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
    helper.make_node("Gemm", ["flat", weight("fc.weight", [5, 16]), weight("fc.bias", [5])], ["y"], name="fc",
                     transB=1),
]
graph = helper.make_graph(nodes, "tiny_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])], initializers)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="partita-tests")
model = onnx.shape_inference.infer_shapes(model)
onnx.checker.check_model(model)
onnx.save(model, __file__.replace("make_tiny_cnn.py", "tiny_cnn.onnx"))
