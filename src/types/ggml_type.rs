//! ggml tensor types: on-disk id, name, block geometry.

use std::fmt;

/// A ggml tensor type. Discriminants are ggml's `enum ggml_type` ids, with
/// gaps where ggml removed a type (see [`RemovedGgmlType`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
    Q2_0 = 42,
}

/// Geometry of one type: `block_size` elements are stored in `type_size` bytes.
struct Geometry {
    ty: GgmlType,
    name: &'static str,
    block_size: u64,
    type_size: u64,
}

const QK_K: u64 = 256;

/// The table. Sizes are ggml's `sizeof(block_*)`, written as the sum of the
/// block's fields so a reader can check them against `ggml-common.h`.
const TABLE: &[Geometry] = &[
    geo(GgmlType::F32, "F32", 1, 4),
    geo(GgmlType::F16, "F16", 1, 2),
    geo(GgmlType::Q4_0, "Q4_0", 32, 2 + 16),
    geo(GgmlType::Q4_1, "Q4_1", 32, 2 + 2 + 16),
    geo(GgmlType::Q5_0, "Q5_0", 32, 2 + 4 + 16),
    geo(GgmlType::Q5_1, "Q5_1", 32, 2 + 2 + 4 + 16),
    geo(GgmlType::Q8_0, "Q8_0", 32, 2 + 32),
    geo(GgmlType::Q8_1, "Q8_1", 32, 2 + 2 + 32),
    geo(GgmlType::Q2_K, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4),
    geo(GgmlType::Q3_K, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12),
    geo(GgmlType::Q4_K, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12),
    geo(GgmlType::Q5_K, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12),
    geo(GgmlType::Q6_K, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16),
    geo(GgmlType::Q8_K, "Q8_K", QK_K, 4 + QK_K + QK_K / 8),
    geo(GgmlType::IQ2_XXS, "IQ2_XXS", QK_K, 2 + QK_K / 4),
    geo(GgmlType::IQ2_XS, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
    geo(GgmlType::IQ3_XXS, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8),
    geo(GgmlType::IQ1_S, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
    geo(GgmlType::IQ4_NL, "IQ4_NL", 32, 2 + 16),
    geo(GgmlType::IQ3_S, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4),
    geo(GgmlType::IQ2_S, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16),
    geo(GgmlType::IQ4_XS, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64),
    geo(GgmlType::I8, "I8", 1, 1),
    geo(GgmlType::I16, "I16", 1, 2),
    geo(GgmlType::I32, "I32", 1, 4),
    geo(GgmlType::I64, "I64", 1, 8),
    geo(GgmlType::F64, "F64", 1, 8),
    geo(GgmlType::IQ1_M, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
    geo(GgmlType::BF16, "BF16", 1, 2),
    geo(GgmlType::TQ1_0, "TQ1_0", QK_K, 2 + (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64),
    geo(GgmlType::TQ2_0, "TQ2_0", QK_K, 2 + QK_K / 4),
    geo(GgmlType::MXFP4, "MXFP4", 32, 1 + 16),
    geo(GgmlType::NVFP4, "NVFP4", 64, 64 / 16 + 64 / 2),
    geo(GgmlType::Q1_0, "Q1_0", 128, 2 + 128 / 8),
    geo(GgmlType::Q2_0, "Q2_0", 64, 2 + 64 / 4),
];

const fn geo(ty: GgmlType, name: &'static str, block_size: u64, type_size: u64) -> Geometry {
    Geometry { ty, name, block_size, type_size }
}

/// Ids ggml once used and has since removed. Files may still carry them;
/// naming them gives a better error than "unknown type".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovedGgmlType {
    pub id: u32,
    pub name: &'static str,
}

const REMOVED: &[RemovedGgmlType] = &[
    RemovedGgmlType { id: 4, name: "Q4_2" },
    RemovedGgmlType { id: 5, name: "Q4_3" },
    RemovedGgmlType { id: 31, name: "Q4_0_4_4" },
    RemovedGgmlType { id: 32, name: "Q4_0_4_8" },
    RemovedGgmlType { id: 33, name: "Q4_0_8_8" },
    RemovedGgmlType { id: 36, name: "IQ4_NL_4_4" },
    RemovedGgmlType { id: 37, name: "IQ4_NL_4_8" },
    RemovedGgmlType { id: 38, name: "IQ4_NL_8_8" },
];

impl RemovedGgmlType {
    pub fn from_id(id: u32) -> Option<RemovedGgmlType> {
        REMOVED.iter().copied().find(|r| r.id == id)
    }
}

impl GgmlType {
    /// Every type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|g| g.ty)
    }

    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|g| g.ty as u32 == id).map(|g| g.ty)
    }

    /// Looks a type up by name, ignoring case (`q4_k`, `Q4_K` and ggml's
    /// own `q4_K` all work).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE.iter().find(|g| g.name.eq_ignore_ascii_case(name)).map(|g| g.ty)
    }

    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The canonical upper-case name, as gguf-py spells it.
    pub fn name(self) -> &'static str {
        self.geometry().name
    }

    /// Elements per block.
    pub const fn block_size(self) -> u64 {
        self.geometry().block_size
    }

    /// Bytes per block.
    pub const fn type_size(self) -> u64 {
        self.geometry().type_size
    }

    pub fn bits_per_weight(self) -> f64 {
        (self.type_size() * 8) as f64 / self.block_size() as f64
    }

    /// True for the block-quantized types (everything with a block of more
    /// than one element).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of one row of `n_elements`, or `None` when the row is not a
    /// whole number of blocks.
    pub fn row_size(self, n_elements: u64) -> Option<u64> {
        if !n_elements.is_multiple_of(self.block_size()) {
            return None;
        }
        (n_elements / self.block_size()).checked_mul(self.type_size())
    }

    /// Const so block structs can assert their size against the table.
    const fn geometry(self) -> &'static Geometry {
        let mut idx = 0;
        while idx < TABLE.len() {
            if TABLE[idx].ty as u32 == self as u32 {
                return &TABLE[idx];
            }
            idx += 1;
        }
        panic!("TABLE holds every variant (tested below)")
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// By canonical name, as manifests and reports spell types.
impl serde::Serialize for GgmlType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for GgmlType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<GgmlType, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        GgmlType::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown ggml type `{name}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_id_order_and_has_every_variant_once() {
        let ids: Vec<u32> = TABLE.iter().map(|g| g.ty as u32).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(ids, sorted);
        assert_eq!(ids.len(), 35);
        for g in TABLE {
            assert_eq!(g.ty.name(), g.name);
            assert_eq!(GgmlType::from_id(g.ty.id()), Some(g.ty));
            assert_eq!(GgmlType::from_name(&g.name.to_lowercase()), Some(g.ty));
        }
    }

    #[test]
    fn removed_ids_are_not_types() {
        for r in REMOVED {
            assert_eq!(GgmlType::from_id(r.id), None);
        }
        assert_eq!(GgmlType::from_id(43), None);
    }

    #[test]
    fn block_geometry_matches_ggml_common() {
        // (type, block size, bytes) as `sizeof(block_*)` in ggml-common.h.
        let expected = [
            (GgmlType::Q4_0, 32, 18),
            (GgmlType::Q4_1, 32, 20),
            (GgmlType::Q5_0, 32, 22),
            (GgmlType::Q5_1, 32, 24),
            (GgmlType::Q8_0, 32, 34),
            (GgmlType::Q8_1, 32, 36),
            (GgmlType::Q2_K, 256, 84),
            (GgmlType::Q3_K, 256, 110),
            (GgmlType::Q4_K, 256, 144),
            (GgmlType::Q5_K, 256, 176),
            (GgmlType::Q6_K, 256, 210),
            (GgmlType::Q8_K, 256, 292),
            (GgmlType::IQ2_XXS, 256, 66),
            (GgmlType::IQ2_XS, 256, 74),
            (GgmlType::IQ3_XXS, 256, 98),
            (GgmlType::IQ1_S, 256, 50),
            (GgmlType::IQ4_NL, 32, 18),
            (GgmlType::IQ3_S, 256, 110),
            (GgmlType::IQ2_S, 256, 82),
            (GgmlType::IQ4_XS, 256, 136),
            (GgmlType::IQ1_M, 256, 56),
            (GgmlType::TQ1_0, 256, 54),
            (GgmlType::TQ2_0, 256, 66),
            (GgmlType::MXFP4, 32, 17),
            (GgmlType::NVFP4, 64, 36),
            (GgmlType::Q1_0, 128, 18),
            (GgmlType::Q2_0, 64, 18),
        ];
        for (ty, block, bytes) in expected {
            assert_eq!((ty.block_size(), ty.type_size()), (block, bytes), "{ty}");
        }
        assert_eq!(GgmlType::Q4_K.bits_per_weight(), 4.5);
        assert_eq!(GgmlType::Q6_K.row_size(640), None);
        assert_eq!(GgmlType::Q8_0.row_size(640), Some(680));
    }
}
