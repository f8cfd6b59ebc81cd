//! Reading model files to say what they are, outside any recipe: `inspect`
//! (a file's header, architecture and tensors), `diff` (two files, tensor by
//! tensor, with their error), `verify` (a file against the derivation it
//! claims). Each takes paths and returns a report; none parses arguments or
//! prints.

pub mod diff;
pub mod inspect;
pub mod verify;
