//! Call frame information (`.eh_frame`, found through `.eh_frame_hdr`) of
//! an ELF object: the unwinding row at an address. One lookup for the
//! recorder's unwinder of blocked threads and the analyzer's MPI binding
//! frames. The sections come from files processes mapped: untrusted, so
//! their sizes are bounded by the caller ([`MAX_CFI_BYTES`]) and every
//! failure is `None`.

use gimli::{
    BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindContext, UnwindSection as _,
    UnwindTableRow,
};
use object::{Object as _, ObjectSection as _};

/// Most bytes of an object's `.eh_frame` or `.eh_frame_hdr` kept (a large
/// runtime library has a few MB).
pub const MAX_CFI_BYTES: u64 = 64 << 20;

/// An object's unwind sections, copied out of its file.
#[derive(Debug, Default)]
pub struct CfiSections {
    /// `.eh_frame`: bytes and address.
    pub eh_frame: Option<(Vec<u8>, u64)>,
    /// `.eh_frame_hdr`: bytes and address.
    pub eh_frame_hdr: Option<(Vec<u8>, u64)>,
    /// `.text` address (bases for `DW_EH_PE_textrel`, rare).
    pub text: u64,
}

impl CfiSections {
    /// The unwind sections of `file`, each of at most [`MAX_CFI_BYTES`].
    pub fn of<'data, R: object::ReadRef<'data>>(file: &object::File<'data, R>) -> Self {
        let section = |name: &str| {
            let s = file.section_by_name(name)?;
            if s.size() > MAX_CFI_BYTES {
                return None;
            }
            Some((s.data().ok()?.to_vec(), s.address()))
        };
        Self {
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            text: file.section_by_name(".text").map_or(0, |s| s.address()),
        }
    }

    /// The unwinding row at virtual address `vaddr`: `None` when the object
    /// has no call frame information for it.
    pub fn row(&self, ctx: &mut UnwindContext<usize>, vaddr: u64) -> Option<UnwindTableRow<usize>> {
        let (eh, eh_address) = self.eh_frame.as_ref()?;
        let eh_frame = EhFrame::new(eh, LittleEndian);
        let mut bases = BaseAddresses::default()
            .set_eh_frame(*eh_address)
            .set_text(self.text);
        let hdr_table = self.eh_frame_hdr.as_ref().and_then(|(hdr, hdr_address)| {
            bases = bases.clone().set_eh_frame_hdr(*hdr_address);
            EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()
        });
        let row = match hdr_table.as_ref().and_then(|h| h.table()) {
            Some(table) => table
                .unwind_info_for_address(&eh_frame, &bases, ctx, vaddr, |s, b, o| {
                    s.cie_from_offset(b, o)
                })
                .ok()?,
            None => eh_frame
                .unwind_info_for_address(&bases, ctx, vaddr, EhFrame::cie_from_offset)
                .ok()?,
        };
        Some(row.clone())
    }
}

#[cfg(test)]
mod tests {
    use object::ObjectSymbol as _;

    use super::*;

    /// Every function of this test program, at its first instruction, has
    /// its frame at the stack pointer plus the return address (x86-64);
    /// an address no function holds has no row.
    #[test]
    fn a_functions_first_row_puts_its_frame_above_the_return_address() {
        let data = std::fs::read("/proc/self/exe").expect("this program");
        let file = object::File::parse(&*data).expect("ELF");
        let cfi = CfiSections::of(&file);
        assert!(cfi.eh_frame.is_some(), "no .eh_frame");
        let mut ctx = UnwindContext::new();
        let starts: Vec<u64> = file
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 16)
            .map(|s| s.address())
            .take(50)
            .collect();
        assert!(starts.len() >= 10, "{} functions", starts.len());
        let mut seen = 0;
        for start in starts {
            // Functions without CFI (hand-written assembly) have no row.
            let Some(row) = cfi.row(&mut ctx, start) else {
                continue;
            };
            seen += 1;
            assert_eq!(
                *row.cfa(),
                gimli::CfaRule::RegisterAndOffset {
                    register: gimli::X86_64::RSP,
                    offset: 8
                },
                "at {start:#x}"
            );
        }
        assert!(seen >= 10, "{seen} functions with a row");
        assert!(cfi.row(&mut ctx, 0).is_none());
    }
}
