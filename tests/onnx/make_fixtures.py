#!/usr/bin/env python3
"""Builds the ONNX fixtures of tests/it/onnx.rs with the `onnx` package.

Usage: make_fixtures.py OUTDIR   (tests/data/onnx; needs onnx and
ml_dtypes, e.g. in the convert venv: pip install onnx)

Writes, with a fixed seed:
  model.onnx     initializers of every type ggml holds, as raw_data and as
                 the typed fields (float_data, int32_data, int64_data,
                 double_data, uint64_data), Constant nodes (value,
                 value_float(s), value_int(s)), two opsets, metadata_props;
  external/      the same kind of model with its weights as external data:
                 one file per tensor for some, several tensors at offsets in
                 one shared file for others (save_model's layout);
  far.onnx       one initializer as external data 5 GB into far.weights (past
                 2^31 and 2^32), a sparse file not kept: tests/it/onnx.rs makes it
                 again with the same 60 bytes (0.5 * arange(15) as f32) there;
  subgraph.onnx  an If node whose branches hold initializers and a Constant:
                 a subgraph's weights are read with the graph's;
  bad-*.onnx     external data that must be refused (beside external/'s
                 files): a missing file, a range past the file's end, a
                 location with `..`, an absolute location, a length that does
                 not match the shape;
  expected.json  every tensor's ggml type, ggml dims and the sha256 of
                 onnx.numpy_helper.to_array's values converted by numpy to
                 the type ggml holds them as; the metadata expected.
"""

import copy
import hashlib
import json
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# data type -> (numpy type to compare as, ggml type name)
GGML_OF = {
    TensorProto.FLOAT: (np.float32, "F32"),
    TensorProto.DOUBLE: (np.float64, "F64"),
    TensorProto.FLOAT16: (np.float16, "F16"),
    TensorProto.BFLOAT16: (ml_dtypes.bfloat16, "BF16"),
    TensorProto.INT64: (np.int64, "I64"),
    TensorProto.INT32: (np.int32, "I32"),
    TensorProto.INT16: (np.int16, "I16"),
    TensorProto.INT8: (np.int8, "I8"),
    TensorProto.UINT8: (np.int16, "I16"),
    TensorProto.BOOL: (np.int8, "I8"),
    TensorProto.UINT16: (np.int32, "I32"),
    TensorProto.UINT32: (np.int64, "I64"),
    TensorProto.FLOAT8E4M3FN: (np.float16, "F16"),
    TensorProto.FLOAT8E5M2: (np.float16, "F16"),
    TensorProto.FLOAT8E4M3FNUZ: (np.float16, "F16"),
    TensorProto.FLOAT8E5M2FNUZ: (np.float16, "F16"),
    TensorProto.FLOAT8E8M0: (np.float32, "F32"),
}

NUMPY_OF = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
    TensorProto.BFLOAT16: ml_dtypes.bfloat16, TensorProto.INT64: np.int64, TensorProto.INT32: np.int32,
    TensorProto.INT16: np.int16, TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8,
    TensorProto.BOOL: np.bool_, TensorProto.UINT16: np.uint16, TensorProto.UINT32: np.uint32,
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    TensorProto.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
}


def values(rng, data_type, shape):
    np_type = NUMPY_OF[data_type]
    if data_type == TensorProto.BOOL:
        return rng.random(shape) > 0.5
    if np.issubdtype(np.dtype(np_type), np.integer):
        info = np.iinfo(np_type)
        return rng.integers(info.min, info.max, size=shape, dtype=np.int64 if info.min < 0 else np.uint64,
                            endpoint=True).astype(np_type)
    if data_type == TensorProto.FLOAT8E8M0:
        return (rng.random(shape) * 1000 + 1e-3).astype(np.float32).astype(np_type)
    return rng.standard_normal(shape).astype(np.float32).astype(np_type)


def typed(name, data_type, array):
    """A TensorProto holding `array` in its typed field, not raw_data."""
    flat = array.reshape(-1)
    if data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        vals = flat.view(np.uint16).astype(np.int32).tolist()
    elif data_type in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E4M3FNUZ,
                       TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT8E8M0):
        vals = flat.view(np.uint8).astype(np.int32).tolist()
    else:
        vals = flat.tolist()
    t = helper.make_tensor(name, data_type, array.shape, vals, raw=False)
    if data_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16) or data_type >= 17:
        # make_tensor would convert floats; put the bits in int32_data as ONNX stores them.
        del t.int32_data[:]
        t.int32_data.extend(vals)
    return t


def expected_of(tensor, base_dir):
    array = numpy_helper.to_array(tensor, base_dir=str(base_dir))
    target, ggml = GGML_OF[tensor.data_type]
    converted = np.ascontiguousarray(array.astype(target))
    return {
        "name": tensor.name,
        "type": ggml,
        "dims": list(reversed(array.shape)) or [1],
        "sha256": hashlib.sha256(converted.tobytes()).hexdigest(),
    }


def build(rng, external):
    initializers = []
    for data_type in GGML_OF:
        name = TensorProto.DataType.Name(data_type).lower()
        array = values(rng, data_type, (3, 5))
        initializers.append(numpy_helper.from_array(array, name=f"raw.{name}"))
        if not external:
            initializers.append(typed(f"typed.{name}", data_type, values(rng, data_type, (2, 3))))
    initializers.append(numpy_helper.from_array(rng.standard_normal((2, 1, 3, 4)).astype(np.float32), "four_d"))
    initializers.append(numpy_helper.from_array(np.array(2.5, dtype=np.float32), "scalar"))
    initializers.append(numpy_helper.from_array(np.zeros((0, 3), dtype=np.float32), "empty"))
    nodes = [
        helper.make_node("Constant", [], ["const.tensor"],
                         value=numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float16))),
        helper.make_node("Constant", [], ["const.float"], value_float=1.25),
        helper.make_node("Constant", [], ["const.floats"], value_floats=[1.0, -2.5, 3.75]),
        helper.make_node("Constant", [], ["const.int"], value_int=-7),
        helper.make_node("Constant", [], ["const.ints"], value_ints=[1, -2, 3, 1 << 40]),
        helper.make_node("Add", ["raw.float", "const.tensor"], ["sum"]),
    ]
    graph = helper.make_graph(nodes, "tiny-graph", [], [helper.make_tensor_value_info("sum", TensorProto.FLOAT, None)],
                              initializer=initializers)
    model = helper.make_model(graph, producer_name="quantforge-fixtures", producer_version="1.0",
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.example", 2)])
    model.model_version = 3
    helper.set_model_props(model, {"author": "tests", "license": "mit"})
    return model


def main():
    out = Path(sys.argv[1])
    # save_model appends external data to files already there: start empty.
    shutil.rmtree(out / "external", ignore_errors=True)
    (out / "external").mkdir(parents=True)
    rng = np.random.default_rng(20261201)

    model = build(rng, external=False)
    onnx.save_model(model, out / "model.onnx")

    ext = build(rng, external=True)
    onnx.save_model(ext, out / "external" / "model.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=False, size_threshold=64)
    shared = build(rng, external=True)
    onnx.save_model(shared, out / "external" / "shared.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location="shared.weights", size_threshold=0)

    def load(path, base):
        m = onnx.load(path, load_external_data=False)
        graph_tensors = list(m.graph.initializer) + [n.attribute[0].t for n in m.graph.node
                                                     if n.op_type == "Constant" and n.attribute[0].name == "value"]
        return m, graph_tensors

    expected = {}
    for rel in ["model.onnx", "external/model.onnx", "external/shared.onnx"]:
        path = out / rel
        m, _ = load(path, path.parent)
        tensors = [expected_of(t, path.parent) for t in m.graph.initializer]
        for node in m.graph.node:
            if node.op_type != "Constant":
                continue
            attr = node.attribute[0]
            if attr.name == "value":
                t = copy.deepcopy(attr.t)
            elif attr.name in ("value_float", "value_floats"):
                v = [attr.f] if attr.name == "value_float" else list(attr.floats)
                t = numpy_helper.from_array(np.array(v if attr.name.endswith("s") else v[0], dtype=np.float32))
            else:
                v = [attr.i] if attr.name == "value_int" else list(attr.ints)
                t = numpy_helper.from_array(np.array(v if attr.name.endswith("s") else v[0], dtype=np.int64))
            t.name = node.output[0]
            tensors.append(expected_of(t, path.parent))
        metadata = {"onnx.ir_version": m.ir_version, "onnx.producer_name": m.producer_name,
                    "onnx.producer_version": m.producer_version, "onnx.model_version": m.model_version,
                    "onnx.graph.name": m.graph.name}
        for opset in m.opset_import:
            metadata[f"onnx.opset.{opset.domain or 'ai.onnx'}"] = opset.version
        for prop in m.metadata_props:
            metadata[f"onnx.metadata.{prop.key}"] = prop.value
        expected[rel] = {"tensors": tensors, "metadata": metadata}

    # Subgraphs: an If's branches with weights of their own.
    def branch(tag, with_constant):
        nodes = [helper.make_node("Identity", [f"{tag}.w"], [f"{tag}.out"])]
        if with_constant:
            nodes.insert(0, helper.make_node("Constant", [], [f"{tag}.c"], value_ints=[4, 5, 6]))
        return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"{tag}.out", TensorProto.FLOAT, None)],
                                 initializer=[numpy_helper.from_array(values(rng, TensorProto.FLOAT, (2, 2)), f"{tag}.w")])
    if_node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", True), else_branch=branch("else", False))
    outer = helper.make_graph([if_node], "outer", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(values(rng, TensorProto.INT64, (3,)), "outer.w")])
    sub = helper.make_model(outer, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save_model(sub, out / "subgraph.onnx")
    inits, consts = [], []

    def walk(g):
        for node in g.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for sg in attr.graphs:
                    walk(sg)
            if node.op_type == "Constant":
                t = numpy_helper.from_array(np.array(list(node.attribute[0].ints), dtype=np.int64))
                t.name = node.output[0]
                consts.append(t)
        inits.extend(g.initializer)

    walk(onnx.load(out / "subgraph.onnx").graph)
    expected["subgraph.onnx"] = {
        "tensors": [expected_of(t, out) for t in inits + consts],
        "metadata": {"onnx.ir_version": sub.ir_version, "onnx.graph.name": "outer", "onnx.opset.ai.onnx": 21},
    }

    # External data that must be refused, each beside external/'s files.
    base, _ = load(out / "external" / "shared.onnx", None)
    target = next(t for t in base.graph.initializer if t.name == "raw.float")

    def bad(name, **changes):
        m = copy.deepcopy(base)
        t = next(t for t in m.graph.initializer if t.name == target.name)
        entries = {e.key: e.value for e in t.external_data}
        entries.update({k: str(v) for k, v in changes.items()})
        del t.external_data[:]
        for key, value in entries.items():
            t.external_data.add(key=key, value=value)
        onnx.save_model(m, out / "external" / f"bad-{name}.onnx")

    bad("missing", location="no-such.weights")
    bad("past-end", offset=(out / "external" / "shared.weights").stat().st_size - 8)
    bad("dotdot", location="../model.onnx")
    bad("absolute", location="/etc/hostname")
    bad("length", length=12)
    # Past 2^32: a sparse file, made again by the test.
    far_offset = 5_000_000_000
    far_values = (np.arange(15, dtype=np.float32) * 0.5).reshape(3, 5)
    far = numpy_helper.from_array(far_values, "far")
    far.ClearField("raw_data")
    far.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "far.weights"), ("offset", str(far_offset)), ("length", "60")):
        far.external_data.add(key=key, value=value)
    far_model = helper.make_model(helper.make_graph([], "far", [], [], initializer=[far]))
    onnx.save_model(far_model, out / "external" / "far.onnx")
    weights = out / "external" / "far.weights"
    with open(weights, "wb") as f:
        f.seek(far_offset)
        f.write(far_values.tobytes())
    m = onnx.load(out / "external" / "far.onnx", load_external_data=False)
    expected["external/far.onnx"] = {
        "tensors": [expected_of(m.graph.initializer[0], out / "external")],
        "metadata": {"onnx.ir_version": m.ir_version, "onnx.graph.name": "far",
                     **{f"onnx.opset.{o.domain or 'ai.onnx'}": o.version for o in m.opset_import}},
    }
    weights.unlink()

    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
