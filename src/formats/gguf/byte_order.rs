//! Big-endian GGUF tensor data: which tensor types have a big-endian layout,
//! and where the multi-byte fields of their blocks lie.
//!
//! The layouts are the ones gguf-py's `gguf_convert_endian.py` (in the tree
//! we pin) writes, the one tool that defines them: a type it does not convert
//! has no layout here either and is refused by name, on read and on write.
//! Swapping a field is its own inverse, so one table serves both directions.

use crate::types::GgmlType;

/// `(offset, width)` of each multi-byte field of one block (or element).
type Fields = &'static [(usize, usize)];

/// `gguf_convert_endian.py`'s types, in its order (floats first).
const LAYOUTS: [(GgmlType, Fields); 11] = [
    (GgmlType::F32, &[(0, 4)]),
    (GgmlType::F16, &[(0, 2)]),
    (GgmlType::BF16, &[(0, 2)]),
    // The f16 scale `d` ahead of the quants.
    (GgmlType::Q1_0, &[(0, 2)]),
    (GgmlType::Q4_0, &[(0, 2)]),
    (GgmlType::Q8_0, &[(0, 2)]),
    // `d` and `dmin`; the packed 6-bit scales are bytes.
    (GgmlType::Q4_K, &[(0, 2), (2, 2)]),
    // `d` after the quants and the scales.
    (GgmlType::Q6_K, &[(208, 2)]),
    (GgmlType::TQ2_0, &[(64, 2)]),
    // Bytes only: a one-byte scale (E8M0, UE4M3) and nibbles.
    (GgmlType::MXFP4, &[]),
    (GgmlType::NVFP4, &[]),
];

/// The swap between the byte orders of one tensor type's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSwap {
    block_bytes: usize,
    fields: Fields,
}

impl ByteSwap {
    /// `None` when `ty` has no big-endian layout.
    pub fn of(ty: GgmlType) -> Option<ByteSwap> {
        let &(_, fields) = LAYOUTS.iter().find(|(t, _)| *t == ty)?;
        Some(ByteSwap { block_bytes: ty.type_size() as usize, fields })
    }

    /// Swaps every whole block of `bytes` to the other order (a trailing
    /// partial block is left as it is: callers pass whole blocks).
    pub fn apply(self, bytes: &mut [u8]) {
        match self.fields {
            [] => {}
            &[(0, 2)] if self.block_bytes == 2 => bytes.chunks_exact_mut(2).for_each(|e| e.swap(0, 1)),
            &[(0, 4)] if self.block_bytes == 4 => bytes.chunks_exact_mut(4).for_each(|e| e.reverse()),
            fields => {
                for block in bytes.chunks_exact_mut(self.block_bytes) {
                    for &(offset, width) in fields {
                        block[offset..offset + width].reverse();
                    }
                }
            }
        }
    }
}

/// A tensor whose type has no big-endian layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tensor `{}` is {ggml_type}, which has no big-endian layout (gguf_convert_endian.py converts {})",
    crate::text::Name(.tensor),
    handled_names()
)]
pub struct NoBigEndianLayout {
    pub tensor: String,
    pub ggml_type: GgmlType,
}

fn handled_names() -> String {
    LAYOUTS.iter().map(|(t, _)| t.name()).collect::<Vec<_>>().join(", ")
}

/// Refuses the first tensor, in order, whose type has no big-endian layout.
pub fn check_big_endian<'a>(tensors: impl IntoIterator<Item = (&'a str, GgmlType)>) -> Result<(), NoBigEndianLayout> {
    match tensors.into_iter().find(|(_, ty)| ByteSwap::of(*ty).is_none()) {
        Some((tensor, ggml_type)) => Err(NoBigEndianLayout { tensor: tensor.to_owned(), ggml_type }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_lies_inside_its_block_and_apart_from_the_others() {
        for (ty, fields) in LAYOUTS {
            let mut covered = vec![false; ty.type_size() as usize];
            for &(offset, width) in fields {
                for byte in &mut covered[offset..offset + width] {
                    assert!(!*byte, "{ty}: fields overlap");
                    *byte = true;
                }
            }
        }
    }

    #[test]
    fn a_swap_reverses_each_field_and_undoes_itself() {
        let q4_k = ByteSwap::of(GgmlType::Q4_K).unwrap();
        let original: Vec<u8> = (0..2 * 144).map(|i| i as u8).collect();
        let mut bytes = original.clone();
        q4_k.apply(&mut bytes);
        assert_eq!(&bytes[..6], &[1, 0, 3, 2, 4, 5]);
        assert_eq!(&bytes[144..148], &[145, 144, 147, 146]);
        q4_k.apply(&mut bytes);
        assert_eq!(bytes, original);

        let mut f32s = 1.5f32.to_le_bytes().to_vec();
        ByteSwap::of(GgmlType::F32).unwrap().apply(&mut f32s);
        assert_eq!(f32s, 1.5f32.to_be_bytes());
    }

    #[test]
    fn a_type_without_a_layout_is_refused_by_name() {
        assert_eq!(ByteSwap::of(GgmlType::Q5_K), None);
        let err = check_big_endian([("a", GgmlType::F16), ("b", GgmlType::Q5_K)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tensor `b` is Q5_K, which has no big-endian layout (gguf_convert_endian.py converts \
             F32, F16, BF16, Q1_0, Q4_0, Q8_0, Q4_K, Q6_K, TQ2_0, MXFP4, NVFP4)"
        );
    }
}
