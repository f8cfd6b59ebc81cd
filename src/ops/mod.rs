//! Operations behind the commands: each takes parsed inputs and returns a
//! result or a report; none parses arguments or prints.

pub mod diff;
pub mod edit;
pub mod inspect;
pub mod quantize;
pub mod split;
