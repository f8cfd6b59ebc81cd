//! llama file types (`general.file_type`): the "mostly Q4_K_M" labels.

use std::fmt;

use super::GgmlType;

/// A llama `ftype`: the label a whole model file carries. Ids are llama.h's
/// `enum llama_ftype`, with gaps where llama.cpp removed a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileType {
    id: u32,
    name: &'static str,
    description: &'static str,
}

/// `(id, name as llama-quantize spells it, description as llama.cpp prints it)`.
const TABLE: &[(u32, &str, &str)] = &[
    (0, "F32", "all F32"),
    (1, "F16", "F16"),
    (2, "Q4_0", "Q4_0"),
    (3, "Q4_1", "Q4_1"),
    (7, "Q8_0", "Q8_0"),
    (8, "Q5_0", "Q5_0"),
    (9, "Q5_1", "Q5_1"),
    (10, "Q2_K", "Q2_K - Medium"),
    (11, "Q3_K_S", "Q3_K - Small"),
    (12, "Q3_K_M", "Q3_K - Medium"),
    (13, "Q3_K_L", "Q3_K - Large"),
    (14, "Q4_K_S", "Q4_K - Small"),
    (15, "Q4_K_M", "Q4_K - Medium"),
    (16, "Q5_K_S", "Q5_K - Small"),
    (17, "Q5_K_M", "Q5_K - Medium"),
    (18, "Q6_K", "Q6_K"),
    (19, "IQ2_XXS", "IQ2_XXS - 2.0625 bpw"),
    (20, "IQ2_XS", "IQ2_XS - 2.3125 bpw"),
    (21, "Q2_K_S", "Q2_K - Small"),
    (22, "IQ3_XS", "IQ3_XS - 3.3 bpw"),
    (23, "IQ3_XXS", "IQ3_XXS - 3.0625 bpw"),
    (24, "IQ1_S", "IQ1_S - 1.5625 bpw"),
    (25, "IQ4_NL", "IQ4_NL - 4.5 bpw"),
    (26, "IQ3_S", "IQ3_S - 3.4375 bpw"),
    (27, "IQ3_M", "IQ3_S mix - 3.66 bpw"),
    (28, "IQ2_S", "IQ2_S - 2.5 bpw"),
    (29, "IQ2_M", "IQ2_M - 2.7 bpw"),
    (30, "IQ4_XS", "IQ4_XS - 4.25 bpw"),
    (31, "IQ1_M", "IQ1_M - 1.75 bpw"),
    (32, "BF16", "BF16"),
    (36, "TQ1_0", "TQ1_0 - 1.69 bpw ternary"),
    (37, "TQ2_0", "TQ2_0 - 2.06 bpw ternary"),
    (38, "MXFP4_MOE", "MXFP4 MoE"),
    (39, "NVFP4", "NVFP4"),
    (40, "Q1_0", "Q1_0"),
    (41, "Q2_0", "Q2_0"),
];

/// Ids llama.cpp removed: `(id, name)`.
const REMOVED: &[(u32, &str)] =
    &[(4, "Q4_1_SOME_F16"), (5, "Q4_2"), (6, "Q4_3"), (33, "Q4_0_4_4"), (34, "Q4_0_4_8"), (35, "Q4_0_8_8")];

/// llama.cpp's marker for "not specified in the model file".
const GUESSED_FLAG: u32 = 1024;

impl FileType {
    pub fn all() -> impl Iterator<Item = FileType> {
        TABLE.iter().map(|&(id, name, description)| FileType { id, name, description })
    }

    /// Looks up an id; the "guessed" flag llama.cpp may OR in is ignored.
    pub fn from_id(id: u32) -> Option<FileType> {
        let id = id & !GUESSED_FLAG;
        FileType::all().find(|f| f.id == id)
    }

    pub fn from_name(name: &str) -> Option<FileType> {
        FileType::all().find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// The name of an id llama.cpp once used and removed.
    pub fn removed_name(id: u32) -> Option<&'static str> {
        REMOVED.iter().find(|r| r.0 == id).map(|r| r.1)
    }

    pub fn id(self) -> u32 {
        self.id
    }

    /// The id llama.cpp's model loader gives a file without
    /// `general.file_type`: the file type of its most common tensor type
    /// (the first type to reach the top count, in the order `types` come),
    /// flagged as guessed.
    pub fn guessed_id(types: impl IntoIterator<Item = GgmlType>) -> u32 {
        use GgmlType as G;
        let mut counts = std::collections::HashMap::new();
        let (mut top, mut most) = (0u32, G::F32);
        for ty in types {
            let n = counts.entry(ty).or_insert(0u32);
            *n += 1;
            if *n > top {
                (top, most) = (*n, ty);
            }
        }
        let name = match most {
            G::F16 => "F16",
            G::BF16 => "BF16",
            G::Q4_0 => "Q4_0",
            G::Q4_1 => "Q4_1",
            G::Q5_0 => "Q5_0",
            G::Q5_1 => "Q5_1",
            G::Q8_0 => "Q8_0",
            G::Q2_K => "Q2_K",
            G::Q3_K => "Q3_K_M",
            G::Q4_K => "Q4_K_M",
            G::Q5_K => "Q5_K_M",
            G::Q6_K => "Q6_K",
            G::TQ1_0 => "TQ1_0",
            G::TQ2_0 => "TQ2_0",
            G::IQ2_XXS => "IQ2_XXS",
            G::IQ2_XS => "IQ2_XS",
            G::IQ2_S => "IQ2_S",
            G::IQ3_XXS => "IQ3_XXS",
            G::IQ1_S => "IQ1_S",
            G::IQ1_M => "IQ1_M",
            G::IQ4_NL => "IQ4_NL",
            G::IQ4_XS => "IQ4_XS",
            G::IQ3_S => "IQ3_S",
            G::NVFP4 => "NVFP4",
            G::Q1_0 => "Q1_0",
            G::Q2_0 => "Q2_0",
            _ => "F32",
        };
        FileType::from_name(name).expect("a file type of the table").id | GUESSED_FLAG
    }

    pub fn name(self) -> &'static str {
        self.name
    }

    pub fn description(self) -> &'static str {
        self.description
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_guess_is_the_first_type_to_reach_the_top_count() {
        use GgmlType as G;
        assert_eq!(FileType::guessed_id([G::F32, G::Q4_K, G::Q6_K, G::Q4_K, G::Q6_K]), 15 | GUESSED_FLAG);
        assert_eq!(FileType::guessed_id([G::Q3_K, G::F16]), 12 | GUESSED_FLAG);
        assert_eq!(FileType::guessed_id([G::MXFP4]), GUESSED_FLAG);
    }
}
