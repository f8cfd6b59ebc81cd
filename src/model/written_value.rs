//! The written form of a metadata value, `TYPE:VALUE`, as `edit --set` and a
//! recipe's `set-metadata` take it.
//!
//! `TYPE` is a GGUF value type's name (`u8` … `f64`, `bool`, `str`) or an
//! array of one, `arr[TYPE]`, nested at most [`MAX_ARRAY_NESTING`] deep. An
//! array's `VALUE` is a JSON array (`arr[str]:["a","b,c"]`,
//! `arr[arr[i32]]:[[1],[2,3]]`) or, for an array of scalars, its elements as
//! written between commas (`arr[u32]:1,2,3`; nothing is the empty array).
//! Every element must fit its type exactly: `1.5` is no integer, `300` no
//! `u8`, and a JSON string no number.

use std::borrow::Cow;
use std::str::FromStr;

use serde_json::value::RawValue;

use super::metadata::MAX_ARRAY_NESTING;
use super::{Array, Value, ValueType};

/// A value type as written: a scalar, or an array of a written type.
#[derive(Debug, Clone, PartialEq, Eq)]
enum WrittenType {
    Scalar(ValueType),
    Array(Box<WrittenType>),
}

impl WrittenType {
    fn parse(name: &str) -> Result<WrittenType, String> {
        let mut depth = 0;
        let mut rest = name;
        while let Some(inner) = rest.strip_prefix("arr[").and_then(|r| r.strip_suffix(']')) {
            depth += 1;
            if depth > MAX_ARRAY_NESTING {
                return Err(format!("`{name}` nests arrays more than {MAX_ARRAY_NESTING} deep"));
            }
            rest = inner;
        }
        let scalar = ValueType::from_name(rest).filter(|t| *t != ValueType::Array).ok_or_else(|| {
            let names: Vec<&str> =
                ValueType::ALL.iter().filter(|t| **t != ValueType::Array).map(|t| t.name()).collect();
            format!("unknown type `{name}` (expected one of {}, or arr[TYPE])", names.join(", "))
        })?;
        Ok((0..depth).fold(WrittenType::Scalar(scalar), |inner, _| WrittenType::Array(Box::new(inner))))
    }
}

/// Parses `TYPE:VALUE`, e.g. `u32:4096`, `str:tiny`, `arr[f32]:0.5,1`.
pub fn parse_typed_value(text: &str) -> Result<Value, String> {
    let (name, value) = text.split_once(':').ok_or_else(|| format!("`{text}` is not TYPE:VALUE"))?;
    match WrittenType::parse(name)? {
        WrittenType::Scalar(ty) => scalar(ty, value),
        WrittenType::Array(element) => array(&element, value).map(Value::Array),
    }
}

/// The value of a scalar type; numbers may carry surrounding spaces.
pub(super) fn scalar(ty: ValueType, text: &str) -> Result<Value, String> {
    Ok(match ty {
        ValueType::U8 => Value::U8(number(ty, text)?),
        ValueType::I8 => Value::I8(number(ty, text)?),
        ValueType::U16 => Value::U16(number(ty, text)?),
        ValueType::I16 => Value::I16(number(ty, text)?),
        ValueType::U32 => Value::U32(number(ty, text)?),
        ValueType::I32 => Value::I32(number(ty, text)?),
        ValueType::U64 => Value::U64(number(ty, text)?),
        ValueType::I64 => Value::I64(number(ty, text)?),
        ValueType::F32 => Value::F32(number(ty, text)?),
        ValueType::F64 => Value::F64(number(ty, text)?),
        ValueType::Bool => Value::Bool(boolean(text)?),
        ValueType::String => Value::string(text),
        ValueType::Array => return Err("an array is written arr[TYPE]:VALUE".into()),
    })
}

fn number<T: FromStr>(ty: ValueType, text: &str) -> Result<T, String> {
    text.trim().parse().map_err(|_| format!("`{text}` is not a valid {} value", ty.name()))
}

fn boolean(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("`{text}` is not a bool (use true or false)")),
    }
}

fn array(element: &WrittenType, text: &str) -> Result<Array, String> {
    if text.trim_start().starts_with('[') {
        let items: Vec<&RawValue> =
            serde_json::from_str(text).map_err(|e| format!("`{text}` is not a JSON array: {e}"))?;
        return json_array(element, &items);
    }
    match element {
        WrittenType::Array(_) => Err(format!("`{text}` is not a JSON array (arrays of arrays are written as JSON)")),
        WrittenType::Scalar(ty) if text.is_empty() => scalars(*ty, &[]),
        WrittenType::Scalar(ty) => scalars(*ty, &text.split(',').map(Cow::Borrowed).collect::<Vec<_>>()),
    }
}

fn json_array(element: &WrittenType, items: &[&RawValue]) -> Result<Array, String> {
    let ty = match element {
        WrittenType::Array(inner) => {
            let arrays = items.iter().enumerate().map(|(i, item)| {
                let inner_items: Vec<&RawValue> = serde_json::from_str(item.get())
                    .map_err(|_| format!("element {i}: `{}` is not an array", item.get()))?;
                json_array(inner, &inner_items).map_err(|e| format!("element {i}: {e}"))
            });
            return arrays.collect::<Result<_, _>>().map(Array::Array);
        }
        WrittenType::Scalar(ty) => *ty,
    };
    let texts = items.iter().map(|item| {
        let raw = item.get();
        let fits = match ty {
            ValueType::String => return serde_json::from_str::<String>(raw).map(Cow::Owned).map_err(|_| raw),
            ValueType::Bool => matches!(raw, "true" | "false"),
            _ => raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()),
        };
        if fits { Ok(Cow::Borrowed(raw)) } else { Err(raw) }
    });
    let texts = texts
        .enumerate()
        .map(|(i, text)| text.map_err(|raw| format!("element {i}: `{raw}` is not a valid {} value", ty.name())))
        .collect::<Result<Vec<_>, _>>()?;
    scalars(ty, &texts)
}

/// An array of scalars from its elements' texts.
fn scalars(ty: ValueType, texts: &[Cow<'_, str>]) -> Result<Array, String> {
    fn each<T>(texts: &[Cow<'_, str>], parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
        texts.iter().enumerate().map(|(i, text)| parse(text).map_err(|e| format!("element {i}: {e}"))).collect()
    }
    Ok(match ty {
        ValueType::U8 => Array::U8(each(texts, |t| number(ty, t))?),
        ValueType::I8 => Array::I8(each(texts, |t| number(ty, t))?),
        ValueType::U16 => Array::U16(each(texts, |t| number(ty, t))?),
        ValueType::I16 => Array::I16(each(texts, |t| number(ty, t))?),
        ValueType::U32 => Array::U32(each(texts, |t| number(ty, t))?),
        ValueType::I32 => Array::I32(each(texts, |t| number(ty, t))?),
        ValueType::U64 => Array::U64(each(texts, |t| number(ty, t))?),
        ValueType::I64 => Array::I64(each(texts, |t| number(ty, t))?),
        ValueType::F32 => Array::F32(each(texts, |t| number(ty, t))?),
        ValueType::F64 => Array::F64(each(texts, |t| number(ty, t))?),
        ValueType::Bool => Array::Bool(each(texts, boolean)?),
        ValueType::String => Array::String(texts.iter().map(|t| t.as_bytes()).collect()),
        ValueType::Array => return Err("an array's elements are written arr[TYPE]".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Value {
        parse_typed_value(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn scalars_keep_their_written_type() {
        assert_eq!(parsed("u32:4096"), Value::U32(4096));
        assert_eq!(parsed("i8: -3 "), Value::I8(-3));
        assert_eq!(parsed("str: a:b "), Value::string(" a:b "));
        assert_eq!(parsed("bool:true"), Value::Bool(true));
        assert_eq!(parsed("f32:0.1"), Value::F32(0.1));
    }

    #[test]
    fn arrays_are_written_between_commas_or_as_json() {
        assert_eq!(parsed("arr[u32]:1,2,3"), Value::Array(Array::U32(vec![1, 2, 3])));
        assert_eq!(parsed("arr[u32]:[1, 2,3]"), Value::Array(Array::U32(vec![1, 2, 3])));
        assert_eq!(parsed("arr[str]:a, b"), Value::Array(Array::String(["a", " b"].into())));
        assert_eq!(parsed(r#"arr[str]:["a,b", "\u00e9\n"]"#), Value::Array(Array::String(["a,b", "é\n"].into())));
        assert_eq!(parsed("arr[f64]:"), Value::Array(Array::F64(Vec::new())));
        assert_eq!(parsed("arr[bool]:[true,false]"), Value::Array(Array::Bool(vec![true, false])));
        assert_eq!(parsed("arr[f32]:[1e3,-0.5]"), Value::Array(Array::F32(vec![1000.0, -0.5])));
        let nested = Array::Array(vec![Array::I32(vec![1]), Array::I32(vec![]), Array::I32(vec![2, 3])]);
        assert_eq!(parsed("arr[arr[i32]]:[[1],[],[2,3]]"), Value::Array(nested));
    }

    #[test]
    fn an_element_that_does_not_fit_its_type_is_refused_by_position() {
        let refusal = |text: &str| parse_typed_value(text).unwrap_err();
        assert_eq!(refusal("u8:300"), "`300` is not a valid u8 value");
        assert_eq!(refusal("arr[u8]:1,300"), "element 1: `300` is not a valid u8 value");
        assert_eq!(refusal("arr[i32]:[1.5]"), "element 0: `1.5` is not a valid i32 value");
        assert_eq!(refusal(r#"arr[u32]:["1"]"#), r#"element 0: `"1"` is not a valid u32 value"#);
        assert_eq!(refusal("arr[str]:[1]"), "element 0: `1` is not a valid str value");
        assert_eq!(refusal("arr[bool]:[1]"), "element 0: `1` is not a valid bool value");
        assert_eq!(refusal("arr[arr[i32]]:[[1],2]"), "element 1: `2` is not an array");
        assert_eq!(refusal("arr[arr[i32]]:[[1],[true]]"), "element 1: element 0: `true` is not a valid i32 value");
        assert!(refusal("arr[arr[i32]]:1,2").contains("arrays of arrays are written as JSON"));
        assert!(refusal("arr[u32]:[1,").contains("is not a JSON array"));
        assert!(refusal("arr[u32:1").starts_with("unknown type `arr[u32`"));
        assert!(refusal("arr:1").starts_with("unknown type `arr`"));
        assert_eq!(refusal("u32"), "`u32` is not TYPE:VALUE");
    }

    #[test]
    fn nesting_is_bounded_as_the_reader_bounds_it() {
        let deep = |depth| format!("{}u8{}:[]", "arr[".repeat(depth), "]".repeat(depth));
        assert!(parse_typed_value(&deep(MAX_ARRAY_NESTING as usize)).is_ok());
        assert!(parse_typed_value(&deep(MAX_ARRAY_NESTING as usize + 1)).unwrap_err().contains("nests arrays"));
    }
}
