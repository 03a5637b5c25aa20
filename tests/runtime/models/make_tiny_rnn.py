#!/usr/bin/python3
"""Writes tiny_rnn.onnx: the recurrent ops in the forms the LSTM-only zoo models leave out. A
bidirectional linear-before-reset GRU with biases and a learned initial state, its two
directions concatenated, a forward Relu RNN, then a batch-first (layout 1) reverse LSTM with
peepholes and learned initial h and c whose Y and Y_c are both graph outputs. Run with Debian's
python3 (python3-onnx); the file is checked in."""
import random

import onnx
from onnx import TensorProto, helper

SEQ, BATCH, INPUT = 4, 4, 6
GRU_H, RNN_H, LSTM_H = 5, 6, 7

rng = random.Random(0)
def weight(name, shape):
    count = 1
    for d in shape:
        count *= d
    return helper.make_tensor(name, TensorProto.FLOAT, shape, [rng.uniform(-0.5, 0.5) for _ in range(count)])

def shape(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)

nodes = [
    helper.make_node("GRU", ["x", "gru.W", "gru.R", "gru.B", "", "gru.initial_h"], ["gru.Y"], name="gru",
                     hidden_size=GRU_H, direction="bidirectional", linear_before_reset=1),
    # [seq, 2, batch, h] -> [seq, batch, 2 * h]
    helper.make_node("Transpose", ["gru.Y"], ["gru.Yt"], name="gru.transpose", perm=[0, 2, 1, 3]),
    helper.make_node("Reshape", ["gru.Yt", "gru.shape"], ["gru.out"], name="gru.concat_directions"),
    helper.make_node("RNN", ["gru.out", "rnn.W", "rnn.R", "rnn.B"], ["rnn.Y", "rnn.Y_h"], name="rnn",
                     hidden_size=RNN_H, activations=["Relu"]),
    helper.make_node("Squeeze", ["rnn.Y", "axis1"], ["rnn.out"], name="rnn.squeeze"),
    helper.make_node("Transpose", ["rnn.out"], ["rnn.batch_first"], name="rnn.to_batch_first", perm=[1, 0, 2]),
    helper.make_node("LSTM", ["rnn.batch_first", "lstm.W", "lstm.R", "lstm.B", "", "lstm.initial_h",
                              "lstm.initial_c", "lstm.P"], ["y", "", "y_c"], name="lstm",
                     hidden_size=LSTM_H, direction="reverse", layout=1),
]
graph = helper.make_graph(
    nodes, "tiny_rnn",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, BATCH, INPUT])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, SEQ, 1, LSTM_H]),
     helper.make_tensor_value_info("y_c", TensorProto.FLOAT, [BATCH, 1, LSTM_H])],
    [weight("gru.W", [2, 3 * GRU_H, INPUT]), weight("gru.R", [2, 3 * GRU_H, GRU_H]), weight("gru.B", [2, 6 * GRU_H]),
     weight("gru.initial_h", [2, BATCH, GRU_H]), shape("gru.shape", [SEQ, BATCH, 2 * GRU_H]),
     weight("rnn.W", [1, RNN_H, 2 * GRU_H]), weight("rnn.R", [1, RNN_H, RNN_H]), weight("rnn.B", [1, 2 * RNN_H]),
     shape("axis1", [1]),
     weight("lstm.W", [1, 4 * LSTM_H, RNN_H]), weight("lstm.R", [1, 4 * LSTM_H, LSTM_H]),
     weight("lstm.B", [1, 8 * LSTM_H]), weight("lstm.initial_h", [BATCH, 1, LSTM_H]),
     weight("lstm.initial_c", [BATCH, 1, LSTM_H]), weight("lstm.P", [1, 3 * LSTM_H])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="partita-tests")
onnx.checker.check_model(model)
onnx.save(model, __file__.replace("make_tiny_rnn.py", "tiny_rnn.onnx"))
