//! Layer pruning as llama-quantize's `--prune-layers` does it: the tensors
//! of the pruned layers go, the layers after them are numbered again, and
//! `block_count` becomes the count kept.
//!
//! llama.cpp numbers the layers as it meets them, walking the tensors by
//! layer and name, and takes a tensor's layer from the first `blk.N.`
//! anywhere in its name: layers before the first pruned one keep their
//! numbers, every later kept layer takes the next number.

use std::collections::HashMap;

use crate::model::TensorInfo;

/// What pruning leaves of a model's tensors.
pub struct Pruned {
    /// Per input tensor, its name in the output, or `None` when pruned.
    pub names: Vec<Option<String>>,
    /// The layers kept (`<arch>.block_count` of the output).
    pub block_count: u32,
}

/// Parses `--prune-layers L0,L1,…`: layer numbers, sorted, each once.
pub fn parse_layers(text: &str) -> Result<Vec<u32>, String> {
    let layers = text
        .split(',')
        .map(|id| id.trim().parse::<u32>().map_err(|_| format!("invalid layer id `{id}`")))
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(layer_set(layers))
}

/// Layer numbers as a plan holds them: sorted, each once.
pub fn layer_set(mut layers: Vec<u32>) -> Vec<u32> {
    layers.sort_unstable();
    layers.dedup();
    layers
}

/// Prunes `layers` (sorted, not empty) from `tensors`, met in `order`.
pub fn prune(tensors: &[TensorInfo], order: &[usize], layers: &[u32]) -> Pruned {
    let mut names = vec![None; tensors.len()];
    let mut mapped: HashMap<u32, Option<u32>> = HashMap::new();
    let mut next = 0u32;
    for &i in order {
        let name = &tensors[i].name;
        let Some((digits, layer)) = layer_in(name) else {
            names[i] = Some(name.clone());
            continue;
        };
        let new = *mapped.entry(layer).or_insert_with(|| {
            if layers.contains(&layer) {
                None
            } else if layer < layers[0] {
                next = layer + 1;
                Some(layer)
            } else {
                next += 1;
                Some(next - 1)
            }
        });
        names[i] = new.map(|n| format!("{}{n}{}", &name[..digits.start], &name[digits.end..]));
    }
    Pruned { names, block_count: next }
}

/// The first `blk.N.` in `name`: where N's digits are, and N (`None` when
/// there is none, or N does not fit 32 bits).
fn layer_in(name: &str) -> Option<(std::ops::Range<usize>, u32)> {
    let bytes = name.as_bytes();
    name.match_indices("blk.").find_map(|(at, _)| {
        let start = at + 4;
        let len = bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
        let end = start + len;
        (len > 0 && bytes.get(end) == Some(&b'.')).then(|| name[start..end].parse().ok().map(|n| (start..end, n)))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    fn tensor(name: &str) -> TensorInfo {
        TensorInfo::new(name, vec![32], GgmlType::F32)
    }

    #[test]
    fn layers_after_the_first_pruned_are_numbered_again() {
        let names =
            ["token_embd.weight", "blk.0.a", "blk.1.a", "blk.2.a", "blk.3.a", "blk.3.b", "v.blk.4.x", "output.weight"];
        let tensors: Vec<TensorInfo> = names.iter().map(|n| tensor(n)).collect();
        let order: Vec<usize> = (0..tensors.len()).collect();
        let pruned = prune(&tensors, &order, &[1, 2]);
        let got: Vec<Option<&str>> = pruned.names.iter().map(|n| n.as_deref()).collect();
        assert_eq!(
            got,
            [
                Some("token_embd.weight"),
                Some("blk.0.a"),
                None,
                None,
                Some("blk.1.a"),
                Some("blk.1.b"),
                Some("v.blk.2.x"),
                Some("output.weight")
            ]
        );
        assert_eq!(pruned.block_count, 3);
    }

    #[test]
    fn layer_lists_parse_sorted_and_once() {
        assert_eq!(parse_layers("3,1,3"), Ok(vec![1, 3]));
        assert_eq!(parse_layers("1,x"), Err("invalid layer id `x`".to_owned()));
        assert_eq!(parse_layers("-1"), Err("invalid layer id `-1`".to_owned()));
    }
}
