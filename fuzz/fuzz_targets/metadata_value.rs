//! A metadata value as `edit --set` and a recipe's `set-metadata` write it,
//! `KEY=TYPE:VALUE` (arrays as JSON or between commas, nested): any text
//! parses to a value or an error naming the key, never a panic or a stack
//! overflow; a value it parses is one GGUF holds, read back as written.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::gguf;
use quantforge::model::{Endian, Metadata};
use quantforge::ops::edit::parse_set;

fn header(metadata: &Metadata) -> Vec<u8> {
    let layout = gguf::layout(metadata, &[]).expect("a header of one key has a layout");
    let mut bytes = Vec::new();
    gguf::write_header(&mut bytes, Endian::Little, metadata, &[], &layout).expect("writing to memory");
    bytes
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match parse_set(text) {
        Ok((key, value)) => {
            let mut metadata = Metadata::new();
            metadata.set(&key, value);
            let bytes = header(&metadata);
            let read = gguf::read_header_bytes(&bytes, "fuzz.gguf".as_ref()).expect("our header reads back");
            assert_eq!(header(&read.metadata), bytes);
        }
        Err(e) => {
            if let Some((key, _)) = text.split_once('=')
                && e.starts_with("cannot set")
            {
                assert!(e.contains(key), "{e}");
            }
        }
    }
});
