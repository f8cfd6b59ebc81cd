//! llama file types (`general.file_type`): the "mostly Q4_K_M" labels.

use std::fmt;

use super::GgmlType;
use FileType as F;
use GgmlType as G;

/// A llama `ftype`: the label a whole model file carries, and the preset
/// `llama-quantize` takes by that name. Its facts are one row of [`TABLE`].
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    IQ2_XXS,
    IQ2_XS,
    Q2_K_S,
    IQ3_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ3_M,
    IQ2_S,
    IQ2_M,
    IQ4_XS,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4_MOE,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// What llama.cpp says of one file type.
struct Row {
    file_type: FileType,
    /// llama.h's `enum llama_ftype`, with gaps where llama.cpp removed a type.
    id: u32,
    /// As `llama-quantize` spells it.
    name: &'static str,
    /// As llama.cpp prints it.
    description: &'static str,
    /// The tensor type the preset quantizes to where no rule says otherwise
    /// (`llama_model_quantize_impl`); `None` where llama.cpp cannot produce
    /// the file type.
    default: Option<GgmlType>,
    /// The tensor type whose prevalence makes llama.cpp's loader guess this
    /// file type for a file without `general.file_type`.
    guessed_from: Option<GgmlType>,
    /// The 1- and 2-bit codebook presets, which have their own rule set.
    very_low_bit: bool,
}

impl Row {
    const fn new(
        file_type: FileType,
        id: u32,
        name: &'static str,
        description: &'static str,
        default: Option<GgmlType>,
        guessed_from: Option<GgmlType>,
    ) -> Row {
        Row { file_type, id, name, description, default, guessed_from, very_low_bit: false }
    }

    const fn very_low_bit(self) -> Row {
        Row { very_low_bit: true, ..self }
    }
}

/// Every file type, in the enum's order.
const TABLE: &[Row] = &[
    Row::new(F::F32, 0, "F32", "all F32", Some(G::F32), Some(G::F32)),
    Row::new(F::F16, 1, "F16", "F16", Some(G::F16), Some(G::F16)),
    Row::new(F::Q4_0, 2, "Q4_0", "Q4_0", Some(G::Q4_0), Some(G::Q4_0)),
    Row::new(F::Q4_1, 3, "Q4_1", "Q4_1", Some(G::Q4_1), Some(G::Q4_1)),
    Row::new(F::Q8_0, 7, "Q8_0", "Q8_0", Some(G::Q8_0), Some(G::Q8_0)),
    Row::new(F::Q5_0, 8, "Q5_0", "Q5_0", Some(G::Q5_0), Some(G::Q5_0)),
    Row::new(F::Q5_1, 9, "Q5_1", "Q5_1", Some(G::Q5_1), Some(G::Q5_1)),
    Row::new(F::Q2_K, 10, "Q2_K", "Q2_K - Medium", Some(G::Q2_K), Some(G::Q2_K)),
    Row::new(F::Q3_K_S, 11, "Q3_K_S", "Q3_K - Small", Some(G::Q3_K), None),
    Row::new(F::Q3_K_M, 12, "Q3_K_M", "Q3_K - Medium", Some(G::Q3_K), Some(G::Q3_K)),
    Row::new(F::Q3_K_L, 13, "Q3_K_L", "Q3_K - Large", Some(G::Q3_K), None),
    Row::new(F::Q4_K_S, 14, "Q4_K_S", "Q4_K - Small", Some(G::Q4_K), None),
    Row::new(F::Q4_K_M, 15, "Q4_K_M", "Q4_K - Medium", Some(G::Q4_K), Some(G::Q4_K)),
    Row::new(F::Q5_K_S, 16, "Q5_K_S", "Q5_K - Small", Some(G::Q5_K), None),
    Row::new(F::Q5_K_M, 17, "Q5_K_M", "Q5_K - Medium", Some(G::Q5_K), Some(G::Q5_K)),
    Row::new(F::Q6_K, 18, "Q6_K", "Q6_K", Some(G::Q6_K), Some(G::Q6_K)),
    Row::new(F::IQ2_XXS, 19, "IQ2_XXS", "IQ2_XXS - 2.0625 bpw", Some(G::IQ2_XXS), Some(G::IQ2_XXS)).very_low_bit(),
    Row::new(F::IQ2_XS, 20, "IQ2_XS", "IQ2_XS - 2.3125 bpw", Some(G::IQ2_XS), Some(G::IQ2_XS)).very_low_bit(),
    Row::new(F::Q2_K_S, 21, "Q2_K_S", "Q2_K - Small", Some(G::Q2_K), None),
    Row::new(F::IQ3_XS, 22, "IQ3_XS", "IQ3_XS - 3.3 bpw", Some(G::IQ3_S), None),
    Row::new(F::IQ3_XXS, 23, "IQ3_XXS", "IQ3_XXS - 3.0625 bpw", Some(G::IQ3_XXS), Some(G::IQ3_XXS)),
    Row::new(F::IQ1_S, 24, "IQ1_S", "IQ1_S - 1.5625 bpw", Some(G::IQ1_S), Some(G::IQ1_S)).very_low_bit(),
    Row::new(F::IQ4_NL, 25, "IQ4_NL", "IQ4_NL - 4.5 bpw", Some(G::IQ4_NL), Some(G::IQ4_NL)),
    Row::new(F::IQ3_S, 26, "IQ3_S", "IQ3_S - 3.4375 bpw", Some(G::IQ3_S), Some(G::IQ3_S)),
    Row::new(F::IQ3_M, 27, "IQ3_M", "IQ3_S mix - 3.66 bpw", Some(G::IQ3_S), None),
    Row::new(F::IQ2_S, 28, "IQ2_S", "IQ2_S - 2.5 bpw", Some(G::IQ2_XS), Some(G::IQ2_S)).very_low_bit(),
    Row::new(F::IQ2_M, 29, "IQ2_M", "IQ2_M - 2.7 bpw", Some(G::IQ2_S), None).very_low_bit(),
    Row::new(F::IQ4_XS, 30, "IQ4_XS", "IQ4_XS - 4.25 bpw", Some(G::IQ4_XS), Some(G::IQ4_XS)),
    Row::new(F::IQ1_M, 31, "IQ1_M", "IQ1_M - 1.75 bpw", Some(G::IQ1_M), Some(G::IQ1_M)).very_low_bit(),
    Row::new(F::BF16, 32, "BF16", "BF16", Some(G::BF16), Some(G::BF16)),
    Row::new(F::TQ1_0, 36, "TQ1_0", "TQ1_0 - 1.69 bpw ternary", Some(G::TQ1_0), Some(G::TQ1_0)),
    Row::new(F::TQ2_0, 37, "TQ2_0", "TQ2_0 - 2.06 bpw ternary", Some(G::TQ2_0), Some(G::TQ2_0)),
    Row::new(F::MXFP4_MOE, 38, "MXFP4_MOE", "MXFP4 MoE", Some(G::MXFP4), None),
    Row::new(F::NVFP4, 39, "NVFP4", "NVFP4", None, Some(G::NVFP4)),
    Row::new(F::Q1_0, 40, "Q1_0", "Q1_0", Some(G::Q1_0), Some(G::Q1_0)),
    Row::new(F::Q2_0, 41, "Q2_0", "Q2_0", Some(G::Q2_0), Some(G::Q2_0)),
];

/// Ids llama.cpp removed: `(id, name)`.
const REMOVED: &[(u32, &str)] =
    &[(4, "Q4_1_SOME_F16"), (5, "Q4_2"), (6, "Q4_3"), (33, "Q4_0_4_4"), (34, "Q4_0_4_8"), (35, "Q4_0_8_8")];

/// llama.cpp's marker for "not specified in the model file".
const GUESSED_FLAG: u32 = 1024;

impl FileType {
    pub fn all() -> impl Iterator<Item = FileType> {
        TABLE.iter().map(|row| row.file_type)
    }

    fn row(self) -> &'static Row {
        &TABLE[self as usize]
    }

    /// Looks up an id; the "guessed" flag llama.cpp may OR in is ignored.
    pub fn from_id(id: u32) -> Option<FileType> {
        let id = id & !GUESSED_FLAG;
        TABLE.iter().find(|row| row.id == id).map(|row| row.file_type)
    }

    pub fn from_name(name: &str) -> Option<FileType> {
        TABLE.iter().find(|row| row.name.eq_ignore_ascii_case(name)).map(|row| row.file_type)
    }

    /// The name of an id llama.cpp once used and removed.
    pub fn removed_name(id: u32) -> Option<&'static str> {
        REMOVED.iter().find(|r| r.0 == id).map(|r| r.1)
    }

    pub fn id(self) -> u32 {
        self.row().id
    }

    pub fn name(self) -> &'static str {
        self.row().name
    }

    pub fn description(self) -> &'static str {
        self.row().description
    }

    /// The tensor type this preset quantizes to unless a rule says
    /// otherwise; `None` for file types llama.cpp cannot produce.
    pub fn default_type(self) -> Option<GgmlType> {
        self.row().default
    }

    /// The 1- and 2-bit codebook presets (IQ1, IQ2), which llama-quantize
    /// gives their own rule set.
    pub fn is_very_low_bit(self) -> bool {
        self.row().very_low_bit
    }

    /// The id llama.cpp's model loader gives a file without
    /// `general.file_type`: the file type of its most common tensor type
    /// (the first type to reach the top count, in the order `types` come),
    /// flagged as guessed; all-F32 when no file type is guessed from it.
    pub fn guessed_id(types: impl IntoIterator<Item = GgmlType>) -> u32 {
        let mut counts = std::collections::HashMap::new();
        let (mut top, mut most) = (0u32, G::F32);
        for ty in types {
            let n = counts.entry(ty).or_insert(0u32);
            *n += 1;
            if *n > top {
                (top, most) = (*n, ty);
            }
        }
        let guessed = TABLE.iter().find(|row| row.guessed_from == Some(most)).map_or(F::F32, |row| row.file_type);
        guessed.id() | GUESSED_FLAG
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_enum_order_and_names_its_variants() {
        for (index, row) in TABLE.iter().enumerate() {
            assert_eq!(row.file_type as usize, index);
            assert_eq!(row.name, format!("{:?}", row.file_type));
        }
    }

    #[test]
    fn each_tensor_type_guesses_one_file_type() {
        for row in TABLE.iter().filter(|row| row.guessed_from.is_some()) {
            let guessing = TABLE.iter().filter(|other| other.guessed_from == row.guessed_from).count();
            assert_eq!(guessing, 1, "{}", row.name);
        }
    }

    #[test]
    fn ids_are_unique_and_removed_ids_are_gaps() {
        let mut ids: Vec<u32> = FileType::all().map(FileType::id).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for (id, _) in REMOVED {
            assert!(FileType::from_id(*id).is_none());
        }
        assert_eq!(FileType::from_id(15).map(FileType::name), Some("Q4_K_M"));
        assert_eq!(FileType::from_id(15 | GUESSED_FLAG).map(FileType::name), Some("Q4_K_M"));
        assert_eq!(FileType::from_name("q4_k_m").map(FileType::id), Some(15));
    }

    #[test]
    fn default_types() {
        assert_eq!(F::Q4_K_M.default_type(), Some(G::Q4_K));
        assert_eq!(F::IQ2_M.default_type(), Some(G::IQ2_S));
        assert_eq!(F::MXFP4_MOE.default_type(), Some(G::MXFP4));
        assert_eq!(F::F32.default_type(), Some(G::F32));
        // llama.cpp lists NVFP4 as a file type but cannot quantize to it.
        assert_eq!(F::NVFP4.default_type(), None);
        let with_default = FileType::all().filter(|f| f.default_type().is_some()).count();
        assert_eq!(with_default, FileType::all().count() - 1);
    }

    #[test]
    fn the_guess_is_the_first_type_to_reach_the_top_count() {
        use GgmlType as G;
        assert_eq!(FileType::guessed_id([G::F32, G::Q4_K, G::Q6_K, G::Q4_K, G::Q6_K]), 15 | GUESSED_FLAG);
        assert_eq!(FileType::guessed_id([G::Q3_K, G::F16]), 12 | GUESSED_FLAG);
        assert_eq!(FileType::guessed_id([G::MXFP4]), GUESSED_FLAG);
    }
}
