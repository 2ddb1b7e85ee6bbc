//! Decoding captures: [`Capture`] reads a file's chunks and metadata,
//! [`Event`] is one decoded record, [`Symbolizer`] turns addresses into
//! functions with the symbol tables stored in the capture, and [`format`]
//! renders events as text or JSON lines.

mod capture;
pub mod format;
mod symbolize;
mod types;

pub use capture::{Capture, DecodeError, decode_records};
pub use symbolize::{
    Location, ObjectAddress, Symbolizer, is_uretprobe_trampoline, locate_in, lookup, segment_vaddr,
};
pub use types::{
    Event, Frame, addr_string, comm_string, dev_string, ip_addr, nul_padded, syscall_name,
};
