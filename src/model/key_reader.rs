//! The one typed reader of metadata keys: strings, bools, floats, and
//! integers stored at any width, scalar or one per layer.
//!
//! Each read fails with a [`KeyError`] naming the key and what is wrong with
//! its value, so every reader of hyperparameters (a language model's, an
//! mmproj's, the quantization mixture's, a device split's, a shard's
//! `split.*` keys) reads a key the same way and says the same thing when it
//! cannot.

use super::{Array, Metadata, Value};

/// A key that is missing where it is required, or whose value is not what
/// its reader asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct KeyError {
    pub key: String,
    pub problem: String,
}

impl KeyError {
    pub fn new(key: &str, problem: impl Into<String>) -> KeyError {
        KeyError { key: key.to_owned(), problem: problem.into() }
    }

    pub fn missing(key: &str) -> KeyError {
        KeyError::new(key, "missing")
    }
}

impl Metadata {
    /// A UTF-8 string key; `None` when absent.
    pub fn string(&self, key: &str) -> Result<Option<&str>, KeyError> {
        let Some(value) = self.get(key) else { return Ok(None) };
        match value {
            Value::String(s) => s.as_str().map(Some).ok_or_else(|| KeyError::new(key, "is a string that is not UTF-8")),
            other => Err(wrong_type(key, other, "a UTF-8 string")),
        }
    }

    /// A bool key; `None` when absent.
    pub fn flag(&self, key: &str) -> Result<Option<bool>, KeyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(wrong_type(key, other, "a bool")),
        }
    }

    /// An `f32` or `f64` key, widened; `None` when absent.
    pub fn float(&self, key: &str) -> Result<Option<f64>, KeyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::F32(v)) => Ok(Some(f64::from(*v))),
            Some(Value::F64(v)) => Ok(Some(*v)),
            Some(other) => Err(wrong_type(key, other, "a float")),
        }
    }

    /// A non-negative integer key stored at any width that fits `T`, as
    /// llama.cpp's `get_key` reads one; `None` when absent.
    pub fn count<T: TryFrom<u64>>(&self, key: &str) -> Result<Option<T>, KeyError> {
        self.get(key).map(|value| count_of(key, value)).transpose()
    }

    /// A per-layer integer key as llama.cpp's `get_key_or_arr` reads one:
    /// a single value for every layer, or an array of exactly one entry per
    /// layer; `None` when absent.
    pub fn per_layer<T: TryFrom<u64> + Clone>(&self, key: &str, n_layer: usize) -> Result<Option<Vec<T>>, KeyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(entries)) => per_layer_entries(key, entries, n_layer).map(Some),
            Some(value) => Ok(Some(vec![count_of(key, value)?; n_layer])),
        }
    }
}

fn per_layer_entries<T: TryFrom<u64>>(key: &str, entries: &Array, n_layer: usize) -> Result<Vec<T>, KeyError> {
    if entries.len() != n_layer {
        return Err(KeyError::new(key, format!("has {} entries for {n_layer} layers", entries.len())));
    }
    (0..n_layer)
        .map(|layer| {
            let entry = entries.get(layer).expect("every index below len has an entry");
            count_of(key, &entry).map_err(|e| KeyError::new(key, format!("at layer {layer} {}", e.problem)))
        })
        .collect()
}

fn count_of<T: TryFrom<u64>>(key: &str, value: &Value) -> Result<T, KeyError> {
    let n = value.as_u64().ok_or_else(|| wrong_type(key, value, "a non-negative integer"))?;
    T::try_from(n).map_err(|_| KeyError::new(key, format!("is {n}, more than {} holds", std::any::type_name::<T>())))
}

fn wrong_type(key: &str, found: &Value, expected: &str) -> KeyError {
    KeyError::new(key, format!("is {found} ({}), expected {expected}", found.value_type()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(entries: &[(&str, Value)]) -> Metadata {
        let mut metadata = Metadata::new();
        for (key, value) in entries {
            metadata.set(key, value.clone());
        }
        metadata
    }

    #[test]
    fn integers_of_any_width_are_counts() {
        let m = metadata(&[("a", Value::U8(7)), ("b", Value::I64(9)), ("c", Value::U64(1 << 40))]);
        assert_eq!(m.count::<u64>("a"), Ok(Some(7)));
        assert_eq!(m.count::<u32>("b"), Ok(Some(9)));
        assert_eq!(m.count::<u32>("absent"), Ok(None));
        assert_eq!(m.count::<u32>("c").unwrap_err().to_string(), "c: is 1099511627776, more than u32 holds");
    }

    #[test]
    fn a_value_of_another_type_names_key_value_and_type() {
        let m =
            metadata(&[("n", Value::I32(-1)), ("s", Value::U32(3)), ("f", Value::U8(1)), ("x", Value::string("1"))]);
        assert_eq!(m.count::<u64>("n").unwrap_err().to_string(), "n: is -1 (i32), expected a non-negative integer");
        assert_eq!(m.string("s").unwrap_err().to_string(), "s: is 3 (u32), expected a UTF-8 string");
        assert_eq!(m.flag("f").unwrap_err().to_string(), "f: is 1 (u8), expected a bool");
        assert_eq!(m.float("x").unwrap_err().to_string(), "x: is \"1\" (str), expected a float");
        let bytes = metadata(&[("b", Value::String(crate::model::GgufString::from_bytes(vec![0xff])))]);
        assert_eq!(bytes.string("b").unwrap_err().to_string(), "b: is a string that is not UTF-8");
    }

    #[test]
    fn per_layer_keys_are_one_value_or_one_entry_per_layer() {
        let m = metadata(&[
            ("one", Value::U32(4)),
            ("each", Value::Array(Array::I32(vec![4, 0, 2]))),
            ("short", Value::Array(Array::U32(vec![4]))),
            ("floats", Value::Array(Array::F32(vec![1.0, 2.0, 3.0]))),
        ]);
        assert_eq!(m.per_layer::<u64>("one", 3), Ok(Some(vec![4, 4, 4])));
        assert_eq!(m.per_layer::<u32>("each", 3), Ok(Some(vec![4, 0, 2])));
        assert_eq!(m.per_layer::<u32>("absent", 3), Ok(None));
        assert_eq!(m.per_layer::<u32>("short", 3).unwrap_err().to_string(), "short: has 1 entries for 3 layers");
        assert_eq!(
            m.per_layer::<u32>("floats", 3).unwrap_err().to_string(),
            "floats: at layer 0 is 1 (f32), expected a non-negative integer"
        );
    }
}
