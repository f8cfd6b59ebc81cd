//! FP8 checkpoints (`quantization_config.quant_method = "fp8"`, as
//! DeepSeek-V3 and Qwen3's FP8 releases publish them): which tensors are a
//! weight's scales and which are dropped, and the converter's
//! `dequant_simple` of a weight with its scales — the float8 values times
//! the scale repeated over `weight_block_size` blocks and cut to the
//! weight's shape (broadcast as it is without a block size), in f32, one
//! rounding, before any of the family's transforms.

use serde_json::Value as Json;

use super::error::ConvertError;
use crate::backend::Backend;
use crate::formats::ModelFile;
use crate::model::TensorInfo;

/// The `quantization_config` keys an FP8 checkpoint may carry. The
/// converter reads the method and the block size; the scheme of the
/// activations (whose scales it drops) and the format name change nothing
/// it writes, and the modules left unquantized are the weights without a
/// scale.
const FP8_KEYS: [&str; 6] =
    ["quant_method", "weight_block_size", "activation_scheme", "fmt", "modules_to_not_convert", "ignored_layers"];

/// The FP8 settings of a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8 {
    /// Rows × columns of a weight that one scale covers.
    pub block: Option<[u64; 2]>,
}

impl Fp8 {
    /// The checkpoint's FP8 settings: `None` without a `quantization_config`
    /// or with an MXFP4 one; any other quantization method, or a key the
    /// conversion does not read, is refused by name.
    pub fn of(config: &Json) -> Result<Option<Fp8>, ConvertError> {
        let Some(quantization) = config.get("quantization_config") else { return Ok(None) };
        let unmodelled = |key: &str, value: &Json| ConvertError::Unmodelled {
            family: "quantized-checkpoint".to_owned(),
            key: format!("quantization_config.{key}"),
            value: value.to_string(),
        };
        let fields = quantization.as_object().ok_or_else(|| unmodelled("", quantization))?;
        match fields.get("quant_method") {
            Some(Json::String(method)) if method == "fp8" => {}
            // Not dequantized: repacked as it is (`convert::mxfp4`).
            Some(Json::String(method)) if method == "mxfp4" => {
                return super::mxfp4::check_config(fields).map(|()| None);
            }
            Some(other) => return Err(unmodelled("quant_method", other)),
            None => return Err(ConvertError::Config("`quantization_config` has no `quant_method`".to_owned())),
        }
        if let Some((key, value)) = fields.iter().find(|(key, _)| !FP8_KEYS.contains(&key.as_str())) {
            return Err(unmodelled(key, value));
        }
        let block = match fields.get("weight_block_size") {
            None | Some(Json::Null) => None,
            Some(value) => {
                let sizes: Option<Vec<u64>> = value.as_array().and_then(|a| a.iter().map(Json::as_u64).collect());
                match sizes.as_deref() {
                    Some(&[rows, cols]) if rows > 0 && cols > 0 => Some([rows, cols]),
                    _ => {
                        return Err(ConvertError::Config(format!(
                            "`quantization_config.weight_block_size` is {value}, not two positive sizes"
                        )));
                    }
                }
            }
        };
        Ok(Some(Fp8 { block }))
    }

    /// The weight a scale tensor scales (`X.weight_scale_inv` → `X.weight`).
    pub fn scaled_weight(name: &str) -> Option<&str> {
        name.strip_suffix("_scale_inv")
    }

    /// Tensors the converter drops: the activations' scales.
    pub fn is_dropped(name: &str) -> bool {
        name.ends_with(".activation_scale") || name.ends_with("_activation_scale")
    }
}

/// Where a weight's scales are: tensor `tensor` of shard `shard`, each
/// value covering `block` of the weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleAt {
    pub shard: usize,
    pub tensor: usize,
    pub block: Option<[u64; 2]>,
}

/// How the scale applies to a weight: per dimension of the weight (in
/// PyTorch's order, outermost first), its size, and how a weight index
/// becomes a scale offset — divided by the repeat and times the scale's
/// stride, or broadcast (`None`: always the scale's index 0).
#[derive(Debug, Clone)]
struct Axes {
    weight: Vec<u64>,
    scale_at: Vec<Option<(u64, u64)>>,
}

/// Checks that scales of shape `scale_dims` apply to a weight of shape
/// `weight_dims` (both in ggml order) as the converter applies them —
/// repeated over the block along the last two dimensions and cut to the
/// weight, or (without a block) padded with trailing dimensions of one and
/// broadcast — and says how.
fn axes(weight_dims: &[u64], scale_dims: &[u64], block: Option<[u64; 2]>) -> Result<Axes, String> {
    let weight: Vec<u64> = weight_dims.iter().rev().copied().collect();
    let mut scale: Vec<u64> = scale_dims.iter().rev().copied().collect();
    let n = weight.len();
    let mismatch = |scale: &[u64]| format!("scales of shape {scale:?} do not fit a weight of shape {weight:?}");
    let mut repeats = vec![1; n];
    match block {
        Some([rows, cols]) if scale.len() == n && n >= 2 => {
            repeats[n - 2] = rows;
            repeats[n - 1] = cols;
        }
        None if scale.len() <= n => scale.resize(n, 1),
        _ => return Err(mismatch(&scale)),
    }
    let mut scale_at = vec![None; n];
    let mut stride = 1;
    for k in (0..n).rev() {
        // Only repeated scales are cut to the weight; others must match it.
        let covered = match block {
            Some(_) => scale[k].saturating_mul(repeats[k]).min(weight[k]),
            None => scale[k],
        };
        scale_at[k] = match covered {
            _ if covered == weight[k] && scale[k] > 0 => Some((repeats[k], stride)),
            1 => None,
            _ => return Err(mismatch(&scale)),
        };
        stride *= scale[k];
    }
    Ok(Axes { weight, scale_at })
}

/// A weight's scales, read: what multiplies its decoded values.
#[derive(Debug, Clone)]
pub struct WeightScale {
    values: Vec<f32>,
    axes: Axes,
}

impl WeightScale {
    /// Checks, while converting, that scale tensor `scale` fits `weight`.
    pub fn check(weight: &TensorInfo, scale: &TensorInfo, block: Option<[u64; 2]>) -> Result<(), ConvertError> {
        axes(&weight.dims, &scale.dims, block)
            .map(drop)
            .map_err(|problem| ConvertError::Config(format!("`{}`: {problem}", scale.name)))
    }

    /// The scales of `weight`, tensor `index` of `scale_file` each covering
    /// `block` of it, decoded.
    pub fn read(
        weight: &TensorInfo,
        scale_file: &ModelFile,
        index: usize,
        block: Option<[u64; 2]>,
        backend: &dyn Backend,
    ) -> Result<WeightScale, ConvertError> {
        let info = scale_file
            .tensors
            .get(index)
            .ok_or_else(|| ConvertError::Config(format!("no scale tensor {index} for `{}`", weight.name)))?;
        let values = super::tensors::whole_values(scale_file, info, backend)?;
        WeightScale::new(&weight.dims, &info.dims, block, values)
            .map_err(|problem| ConvertError::Config(format!("`{}`: {problem}", info.name)))
    }

    /// Scales `values` of shape `scale_dims` for a weight of shape
    /// `weight_dims` (both in ggml order), each covering `block` of it; an
    /// error says why they do not fit.
    pub fn new(
        weight_dims: &[u64],
        scale_dims: &[u64],
        block: Option<[u64; 2]>,
        values: Vec<f32>,
    ) -> Result<WeightScale, String> {
        let axes = axes(weight_dims, scale_dims, block)?;
        let expected: u64 = scale_dims.iter().product();
        if values.len() as u64 != expected {
            return Err(format!("{} scale values for a shape of {expected}", values.len()));
        }
        Ok(WeightScale { values, axes })
    }

    /// Multiplies `values`, the weight's elements from its flat (row-major,
    /// PyTorch order) element `first` on, by their scales.
    pub fn apply(&self, first: usize, values: &mut [f32]) {
        let Axes { weight, scale_at } = &self.axes;
        let Some((&row_len, outer)) = weight.split_last() else { return };
        let (columns, leading) = scale_at.split_last().expect("as many as the weight's dimensions");
        let row_len = row_len.max(1);
        let (mut at, mut rest) = (first as u64, values);
        while !rest.is_empty() {
            let (row, col) = (at / row_len, at % row_len);
            let (segment, after) = rest.split_at_mut(((row_len - col) as usize).min(rest.len()));
            let mut index = row;
            let mut base = 0;
            for (&size, scale_at) in outer.iter().zip(leading).rev() {
                if let Some((repeat, stride)) = scale_at {
                    base += (index % size) / repeat * stride;
                }
                index /= size.max(1);
            }
            match columns {
                None => segment.iter_mut().for_each(|v| *v *= self.values[base as usize]),
                Some((repeat, stride)) => {
                    let mut c = col;
                    let mut values = &mut segment[..];
                    while !values.is_empty() {
                        let run = ((repeat - c % repeat) as usize).min(values.len());
                        let (these, next) = values.split_at_mut(run);
                        let scale = self.values[(base + c / repeat * stride) as usize];
                        these.iter_mut().for_each(|v| *v *= scale);
                        (values, c) = (next, c + run as u64);
                    }
                }
            }
            at += segment.len() as u64;
            rest = after;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaled(weight_dims: &[u64], scale_dims: &[u64], block: Option<[u64; 2]>, scales: Vec<f32>) -> Vec<f32> {
        let axes = axes(weight_dims, scale_dims, block).unwrap();
        let n: u64 = weight_dims.iter().product();
        let mut values = vec![1f32; n as usize];
        WeightScale { values: scales, axes }.apply(0, &mut values);
        values
    }

    #[test]
    fn blocks_repeat_and_are_cut_to_the_weight() {
        // A 3 × 5 weight (ggml dims [5, 3]) in blocks of 2 × 3: a 2 × 2 grid, cut.
        let values = scaled(&[5, 3], &[2, 2], Some([2, 3]), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(values, [1.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0]);
    }

    #[test]
    fn without_a_block_a_scale_broadcasts_per_row_or_whole() {
        assert_eq!(scaled(&[2, 3], &[3], None, vec![1.0, 2.0, 3.0]), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
        assert_eq!(scaled(&[2, 2], &[], None, vec![5.0]), [5.0; 4]);
    }

    #[test]
    fn stacked_experts_take_their_own_grid() {
        // Two experts of 2 × 2, blocks of 2 × 1: per expert a 1 × 2 grid.
        let values = scaled(&[2, 2, 2], &[2, 1, 2], Some([2, 1]), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(values, [1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]);
    }

    #[test]
    fn a_part_of_a_row_takes_its_columns_scales() {
        let axes = axes(&[5, 3], &[2, 2], Some([2, 3])).unwrap();
        let scale = WeightScale { values: vec![1.0, 2.0, 3.0, 4.0], axes };
        let mut values = [1f32; 6];
        scale.apply(7, &mut values);
        assert_eq!(values, [1.0, 2.0, 2.0, 3.0, 3.0, 3.0]);
    }

    #[test]
    fn scales_that_do_not_cover_the_weight_are_refused() {
        assert!(axes(&[64, 64], &[1, 2], Some([32, 48])).is_err());
        assert!(axes(&[64, 64], &[2, 2], Some([32, 48])).is_ok());
        assert!(axes(&[4, 2], &[3], None).is_err());
    }
}
