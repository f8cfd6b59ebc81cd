//! ONNX models: the weights of a `ModelProto` — its graph's initializers
//! and the values of its `Constant` nodes, its subgraphs' too — with their names and types, and
//! the model's description as metadata under [`METADATA_PREFIX`] (IR
//! version, producer, opsets, graph name, `metadata_props`). The operators
//! themselves are not read: quantforge converts weights, it does not run
//! graphs.
//!
//! Tensors are read where they are: `raw_data` in place in the model file,
//! external data in place in the files beside it (models over 2 GB keep
//! their weights there), the typed fields decoded. Types become ggml types
//! as SafeTensors' do ([`super::safetensors::Dtype`]). What could hold
//! weights and is not read is refused by name: sparse initializers, tensor
//! segments, training information.

mod tensor;
mod wire;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::bytes::ByteReader;
use super::error::{ErrorKind, Result};
use super::source::{OpenOptions, Source};
use crate::model::{GgufString, Metadata, TensorInfo, Value};
use tensor::{ExternalFiles, TensorProto};
use wire::{Wire, WireType};

/// Where a model's description goes in [`Metadata`]: `onnx.producer_name`,
/// `onnx.opset.ai.onnx`, `onnx.metadata.KEY`…
pub const METADATA_PREFIX: &str = "onnx.";

/// A model, in the crate's terms.
pub(crate) struct OnnxHeader {
    pub metadata: Metadata,
    /// Initializers, then `Constant` values, each in the order the file holds
    /// them (a subgraph's where its node is).
    pub tensors: Vec<TensorInfo>,
    /// The files holding external data, as the tensors number them.
    pub externals: Vec<Source>,
}

/// Whether `head` (a file's first bytes) looks like a serialized
/// `ModelProto`: `ir_version` first, as every writer puts it, then another
/// of its fields.
pub(crate) fn looks_like_model(head: &[u8]) -> bool {
    matches!(head, [0x08, 1..=0x7f, next, ..] if matches!(next, 0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42 | 0x72))
}

/// Reads a model held in memory, as if it were the file at `path` (whose
/// directory external data is found in): the fuzz target's way in.
pub fn read_bytes(bytes: &[u8], path: &Path, options: OpenOptions) -> Result<(Metadata, Vec<TensorInfo>, Vec<u64>)> {
    let header = read_header(&mut ByteReader::over_bytes(bytes, path), options)?;
    Ok((header.metadata, header.tensors, header.externals.iter().map(Source::len).collect()))
}

pub(crate) fn read_header(r: &mut ByteReader<'_>, options: OpenOptions) -> Result<OnnxHeader> {
    let model_path = r.path();
    let end = r.remaining();
    let mut w = Wire { r };
    let mut metadata = Vec::new();
    let mut initializers = Vec::new();
    let mut constants = Vec::new();
    w.message(end, "the ModelProto", |w, field, wire| {
        let text = |w: &mut Wire<'_, '_>, key: &str| -> Result<(String, Value)> {
            let value = w.string(wire, end, key)?;
            Ok((format!("{METADATA_PREFIX}{key}"), Value::String(GgufString::from(value))))
        };
        match field {
            1 => metadata.push((format!("{METADATA_PREFIX}ir_version"), Value::I64(w.int(wire, "ir_version")?))),
            2 => metadata.push(text(w, "producer_name")?),
            3 => metadata.push(text(w, "producer_version")?),
            4 => metadata.push(text(w, "domain")?),
            5 => metadata.push((format!("{METADATA_PREFIX}model_version"), Value::I64(w.int(wire, "model_version")?))),
            6 => metadata.push(text(w, "doc_string")?),
            7 => {
                w.expect(wire, WireType::Delimited, "the graph")?;
                let stop = w.delimited_end(end, "the graph")?;
                let mut found = Found { initializers: &mut initializers, constants: &mut constants };
                let name = read_graph(w, stop, 0, &mut found)?;
                metadata.push((format!("{METADATA_PREFIX}graph.name"), Value::String(GgufString::from(name))));
            }
            8 => {
                w.expect(wire, WireType::Delimited, "an opset_import")?;
                let stop = w.delimited_end(end, "an opset_import")?;
                let (mut domain, mut version) = (String::new(), 0);
                w.message(stop, "an opset_import", |w, field, wire| {
                    match field {
                        1 => domain = w.string(wire, stop, "an opset's domain")?,
                        2 => version = w.int(wire, "an opset's version")?,
                        _ => w.skip(wire, stop)?,
                    }
                    Ok(())
                })?;
                let domain = if domain.is_empty() { "ai.onnx".to_owned() } else { domain };
                metadata.push((format!("{METADATA_PREFIX}opset.{domain}"), Value::I64(version)));
            }
            14 => {
                w.expect(wire, WireType::Delimited, "a metadata_props entry")?;
                let stop = w.delimited_end(end, "a metadata_props entry")?;
                let (mut key, mut value) = (String::new(), String::new());
                w.message(stop, "a metadata_props entry", |w, field, wire| {
                    match field {
                        1 => key = w.string(wire, stop, "a metadata key")?,
                        2 => value = w.string(wire, stop, "a metadata value")?,
                        _ => w.skip(wire, stop)?,
                    }
                    Ok(())
                })?;
                metadata.push((format!("{METADATA_PREFIX}metadata.{key}"), Value::String(GgufString::from(value))));
            }
            20 => return Err(w.error(w.pos(), "training_info (its initializers) is not read".into())),
            _ => w.skip(wire, end)?,
        }
        Ok(())
    })?;

    let mut keys = HashSet::new();
    if let Some((key, _)) = metadata.iter().find(|(key, _)| !keys.insert(key.clone())) {
        return Err(w.r.error_at(0, ErrorKind::DuplicateKey { key: key.clone() }));
    }
    let mut externals = ExternalFiles { model: model_path, options, sources: Vec::new(), index: HashMap::new() };
    let mut names = HashSet::new();
    let mut tensors = Vec::with_capacity(initializers.len() + constants.len());
    for proto in initializers.into_iter().chain(constants) {
        let at = proto.at;
        let tensor = proto.place(&w, &mut externals)?;
        if !names.insert(tensor.name.clone()) {
            return Err(w.r.error_at(at, ErrorKind::DuplicateTensor { tensor: tensor.name }));
        }
        tensors.push(tensor);
    }
    Ok(OnnxHeader { metadata: Metadata::from_unique_entries(metadata), tensors, externals: externals.sources })
}

/// Where the weights a graph and its subgraphs hold are gathered, in the
/// order they appear in the file.
struct Found<'a> {
    initializers: &'a mut Vec<TensorProto>,
    constants: &'a mut Vec<TensorProto>,
}

/// How deeply subgraphs (an `If`'s branches, a `Loop`'s body) may nest.
const MAX_GRAPH_DEPTH: usize = 16;

/// Reads a graph's weights into `found`, its subgraphs' too; its name.
fn read_graph(w: &mut Wire<'_, '_>, end: u64, depth: usize, found: &mut Found<'_>) -> Result<String> {
    let mut name = String::new();
    w.message(end, "a graph", |w, field, wire| {
        match field {
            1 => {
                w.expect(wire, WireType::Delimited, "a node")?;
                let stop = w.delimited_end(end, "a node")?;
                if let Some(value) = read_node(w, stop, depth, found)? {
                    found.constants.push(value);
                }
            }
            2 => name = w.string(wire, end, "a graph's name")?,
            5 => {
                w.expect(wire, WireType::Delimited, "an initializer")?;
                let stop = w.delimited_end(end, "an initializer")?;
                found.initializers.push(TensorProto::read(w, stop)?);
            }
            15 => return Err(w.error(w.pos(), "a sparse initializer; sparse tensors are not read".into())),
            _ => w.skip(wire, end)?,
        }
        Ok(())
    })?;
    Ok(name)
}

/// A node's value when it is a `Constant`: its `value` tensor, or a
/// `value_float(s)`/`value_int(s)` made into one, named after its output.
fn read_node(w: &mut Wire<'_, '_>, end: u64, depth: usize, found: &mut Found<'_>) -> Result<Option<TensorProto>> {
    let at = w.pos();
    let (mut op_type, mut domain, mut output) = (String::new(), String::new(), None);
    let mut value: Option<(String, TensorProto)> = None;
    w.message(end, "a node", |w, field, wire| {
        match field {
            2 if output.is_none() => output = Some(w.string(wire, end, "a node's output")?),
            4 => op_type = w.string(wire, end, "a node's op_type")?,
            7 => domain = w.string(wire, end, "a node's domain")?,
            5 => {
                w.expect(wire, WireType::Delimited, "an attribute")?;
                let stop = w.delimited_end(end, "an attribute")?;
                if let Some(attribute) = read_attribute(w, stop, depth, found)? {
                    value = Some(attribute);
                }
            }
            _ => w.skip(wire, end)?,
        }
        Ok(())
    })?;
    if op_type != "Constant" || !(domain.is_empty() || domain == "ai.onnx") {
        return Ok(None);
    }
    let Some((attribute, mut tensor)) = value else {
        return Err(
            w.error(at, "a Constant node without a value, value_float(s) or value_int(s); others are not read".into())
        );
    };
    let Some(output) = output else {
        return Err(w.error(at, format!("a Constant node ({attribute}) without an output")));
    };
    tensor.name = output;
    Ok(Some(tensor))
}

/// An attribute that can be a Constant's value, as a tensor: `value` (a
/// `TensorProto`), `value_float(s)` (FLOAT) or `value_int(s)` (INT64). The
/// weights of a subgraph it holds (`g`, `graphs`) go to `found`.
fn read_attribute(
    w: &mut Wire<'_, '_>,
    end: u64,
    depth: usize,
    found: &mut Found<'_>,
) -> Result<Option<(String, TensorProto)>> {
    let at = w.pos();
    let mut name = String::new();
    let mut tensor = None;
    let (mut floats, mut ints) = (Vec::new(), Vec::new());
    w.message(end, "an attribute", |w, field, wire| {
        match field {
            1 => name = w.string(wire, end, "an attribute's name")?,
            2 | 7 => w.fixed::<4>(wire, end, "an attribute's floats", &mut floats)?,
            3 | 8 => w.varints(wire, end, "an attribute's ints", &mut ints)?,
            5 => {
                w.expect(wire, WireType::Delimited, "an attribute's tensor")?;
                let stop = w.delimited_end(end, "an attribute's tensor")?;
                tensor = Some(TensorProto::read(w, stop)?);
            }
            6 | 11 => {
                w.expect(wire, WireType::Delimited, "a subgraph")?;
                if depth == MAX_GRAPH_DEPTH {
                    return Err(w.error(w.pos(), format!("subgraphs nested deeper than {MAX_GRAPH_DEPTH}")));
                }
                let stop = w.delimited_end(end, "a subgraph")?;
                read_graph(w, stop, depth + 1, found)?;
            }
            _ => w.skip(wire, end)?,
        }
        Ok(())
    })?;
    let scalar = |n: usize| if name.ends_with('s') { vec![n as u64] } else { Vec::new() };
    let made = match name.as_str() {
        "value" => tensor,
        "value_float" | "value_floats" => Some(TensorProto {
            at,
            dims: scalar(floats.len() / 4),
            data_type: 1,
            typed_fields: vec![4],
            fixed: floats,
            ..TensorProto::default()
        }),
        "value_int" | "value_ints" => Some(TensorProto {
            at,
            dims: scalar(ints.len()),
            data_type: 7,
            typed_fields: vec![7],
            varints: ints,
            ..TensorProto::default()
        }),
        _ => None,
    };
    Ok(made.map(|tensor| (name, tensor)))
}
