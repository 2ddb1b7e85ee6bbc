//! Where the threads of traced processes stand when a recording stops
//! inside a system call: their user stacks, read with `process_vm_readv`
//! from the stack pointer the kernel saved at the call's entry (the
//! `blocked` part of the eBPF `INFLIGHT` map) and unwound by the objects'
//! call frame information (`.eh_frame`, found through `.eh_frame_hdr`),
//! with frame pointers where an address has none.
//!
//! A thread inside a system call does not run user code, so its stack is
//! stable while it is read; whether it stayed inside the same call all the
//! while is checked by the caller (the entry's time must not change).
//!
//! x86-64 only, as the rest of the tracer.

use std::{collections::HashMap, fs, path::PathBuf};

use gimli::{CfaRule, Register, RegisterRule, UnwindContext, X86_64};
use tracer_common::{
    capture::{MapEntry, Segment},
    cfi::CfiSections,
    record::{BLOCKED_FRAMES, blocked_flags},
};

use crate::elf::segments;

/// Most bytes of a thread's stack read from its stack pointer up (the
/// mapping's end bounds it too): 64 frames of ordinary daemons fit easily.
pub const STACK_BYTES: u64 = 128 << 10;

/// A copy of a thread's stack from its stack pointer up.
#[derive(Debug, Default)]
pub struct Stack {
    /// Address of `bytes[0]` (the stack pointer).
    base: u64,
    bytes: Vec<u8>,
}

impl Stack {
    /// Reads up to [`STACK_BYTES`] of `pid`'s memory from `sp` to the end
    /// of the mapping that holds `sp`. Empty when nothing could be read (the
    /// process is gone, `sp` is in no mapping).
    pub fn read(pid: u32, sp: u64, maps: &[MapEntry]) -> Self {
        let Some(map) = maps.iter().find(|m| sp >= m.start && sp < m.end) else {
            return Self::default();
        };
        let len = (map.end - sp).min(STACK_BYTES) as usize;
        let mut bytes = vec![0u8; len];
        let local = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: sp as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` is our own buffer of `len` bytes; the kernel
        // checks the remote range and returns how much it copied (-1 on
        // failure, a short count at an unreadable page).
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        bytes.truncate(usize::try_from(n).unwrap_or(0));
        Self { base: sp, bytes }
    }

    /// A stack copied before (by eBPF): `bytes` from address `base` up.
    pub fn from_bytes(base: u64, bytes: Vec<u8>) -> Self {
        Self { base, bytes }
    }

    /// The 8-byte word at `addr`, if the copy holds it.
    fn word(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let b = self.bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// Bytes read.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// An object's unwind sections (copied out: the file itself is read
/// lazily, headers and these sections only) and segments.
#[derive(Debug)]
struct CfiObject {
    segments: Vec<Segment>,
    cfi: CfiSections,
}

impl CfiObject {
    /// Reads the unwind sections of the ELF file `file` (an object a
    /// process mapped: untrusted, so sizes are bounded).
    fn read(file: fs::File) -> Option<Self> {
        let cache = object::ReadCache::new(file);
        let file = object::File::parse(&cache).ok()?;
        Some(Self {
            segments: segments(&file),
            cfi: CfiSections::of(&file),
        })
    }

    /// How to find the caller's registers at virtual address `vaddr`:
    /// `None` when the object has no call frame information for it.
    fn rule(&self, ctx: &mut UnwindContext<usize>, vaddr: u64) -> Option<Step> {
        let row = self.cfi.row(ctx, vaddr)?;
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => (*register, *offset),
            // Expressions (PLT entries, signal frames): not followed.
            CfaRule::Expression(_) => return Some(Step::Unsupported),
        };
        let ra = row.register(X86_64::RA);
        let bp = row.register(X86_64::RBP);
        Some(Step::Cfi { cfa, ra, bp })
    }
}

/// One unwinding step's rules.
enum Step {
    Cfi {
        cfa: (Register, i64),
        ra: Option<RegisterRule<usize>>,
        bp: Option<RegisterRule<usize>>,
    },
    Unsupported,
}

/// Unwinds the stacks of one process's threads, reading each object once.
#[derive(Debug, Default)]
pub struct Unwinder {
    /// Objects by path (`None`: unreadable or not ELF).
    objects: HashMap<String, Option<CfiObject>>,
    ctx: UnwindContext<usize>,
}

impl Unwinder {
    /// An unwinder with no object read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The return addresses of a thread stopped at `ip` with stack pointer
    /// `sp` and frame pointer `bp` (`None`: not known) in process `pid`
    /// mapped as `maps`: `ip` first, then each caller's return address,
    /// innermost first, at most [`BLOCKED_FRAMES`]; and [`blocked_flags`]
    /// saying how it went.
    pub fn unwind(
        &mut self,
        pid: u32,
        maps: &[MapEntry],
        stack: &Stack,
        (ip, sp, bp): (u64, u64, Option<u64>),
    ) -> (Vec<u64>, u32) {
        let mut frames = vec![ip];
        let mut flags = 0;
        let (mut ip, mut sp, mut bp) = (ip, sp, bp);
        let mut first = true;
        loop {
            if frames.len() >= BLOCKED_FRAMES {
                flags |= blocked_flags::TRUNCATED;
                break;
            }
            // A return address is after its call: look the call up.
            let lookup = if first { ip } else { ip.saturating_sub(1) };
            first = false;
            let step = self.step_at(pid, maps, lookup);
            // The frame pointer, found on the stack where it is not known.
            let frame_pointer = |bp: Option<u64>| bp.or_else(|| frame_record(stack, sp, maps));
            let next = match step {
                Some(Step::Cfi {
                    cfa,
                    ra,
                    bp: bp_rule,
                }) => {
                    let base = match cfa.0 {
                        X86_64::RSP => Some(sp),
                        X86_64::RBP => frame_pointer(bp),
                        _ => None,
                    };
                    let cfa = base.map(|b| b.wrapping_add_signed(cfa.1));
                    let ra = match (ra, cfa) {
                        (Some(RegisterRule::Offset(n)), Some(cfa)) => {
                            stack.word(cfa.wrapping_add_signed(n))
                        }
                        // The outermost frame (`_start`, `clone`'s child).
                        (Some(RegisterRule::Undefined), _) => break,
                        _ => None,
                    };
                    // `Some(None)`: the caller's frame pointer is not known
                    // (it was not at the start either); `None`: it was
                    // saved where the copy of the stack does not reach,
                    // which ends the unwinding (a guess would be garbage).
                    let next_bp = match (bp_rule, cfa) {
                        (Some(RegisterRule::Offset(n)), Some(cfa)) => {
                            stack.word(cfa.wrapping_add_signed(n)).map(Some)
                        }
                        (Some(RegisterRule::ValOffset(n)), Some(cfa)) => {
                            Some(Some(cfa.wrapping_add_signed(n)))
                        }
                        (Some(RegisterRule::Undefined), _) => Some(Some(0)),
                        _ => Some(bp),
                    };
                    match (ra, cfa, next_bp) {
                        (Some(ra), Some(cfa), Some(next_bp)) => Some((ra, cfa, next_bp)),
                        _ => None,
                    }
                }
                Some(Step::Unsupported) => None,
                None => {
                    // No call frame information: frame pointers, if `bp`
                    // looks like one (on this stack, above `sp`).
                    flags |= blocked_flags::FRAME_POINTERS;
                    match frame_pointer(bp) {
                        // The chain's end (the outermost frame zeroes it).
                        Some(0) => break,
                        Some(bp) if bp > sp => stack
                            .word(bp.wrapping_add(8))
                            .zip(stack.word(bp))
                            .map(|(ra, nbp)| (ra, bp.wrapping_add(16), Some(nbp))),
                        _ => None,
                    }
                }
            };
            let Some((ra, next_sp, next_bp)) = next else {
                flags |= blocked_flags::INCOMPLETE;
                break;
            };
            if ra == 0 {
                break;
            }
            // The stack only grows towards callers: anything else is a
            // wrong rule or garbage, and would loop.
            if next_sp <= sp {
                flags |= blocked_flags::INCOMPLETE;
                break;
            }
            frames.push(ra);
            (ip, sp, bp) = (ra, next_sp, next_bp);
        }
        (frames, flags)
    }

    /// The unwinding rule at runtime address `addr` of `pid`; `None` when
    /// no readable object with call frame information holds it.
    fn step_at(&mut self, pid: u32, maps: &[MapEntry], addr: u64) -> Option<Step> {
        let map = maps
            .iter()
            .find(|m| addr >= m.start && addr < m.end && m.path.starts_with('/'))?;
        let file_offset = (addr - map.start).checked_add(map.offset)?;
        let object = self
            .objects
            .entry(map.path.clone())
            .or_insert_with(|| {
                // Through the mapping itself: the file the process has, in
                // its own mount namespace, even if deleted or replaced.
                let by_map: PathBuf =
                    format!("/proc/{pid}/map_files/{:x}-{:x}", map.start, map.end).into();
                // A process gone since its stack was copied: the file by
                // its name.
                let file = fs::File::open(&by_map)
                    .or_else(|_| fs::File::open(format!("/proc/{pid}/root{}", map.path)))
                    .or_else(|_| fs::File::open(&map.path))
                    .ok()?;
                CfiObject::read(file)
            })
            .as_ref()?;
        let seg = object
            .segments
            .iter()
            .find(|s| file_offset >= s.offset && file_offset - s.offset < s.filesz)?;
        let vaddr = file_offset - seg.offset + seg.vaddr;
        object.rule(&mut self.ctx, vaddr)
    }
}

/// How far above the stack pointer a frame record is looked for.
const FRAME_RECORD_SCAN: u64 = 4096;

/// The first frame record (saved frame pointer, then a return address)
/// above `sp`, for a thread whose frame pointer is not known (it entered
/// its system call before the recording): the return address must be in
/// executable code of the process and the saved frame pointer 0 or further
/// up the stack. A guess, as every such scan is; only used where call frame
/// information needs the frame pointer.
fn frame_record(stack: &Stack, sp: u64, maps: &[MapEntry]) -> Option<u64> {
    let code = |a: u64| {
        maps.iter()
            .any(|m| a >= m.start && a < m.end && m.perms.contains('x'))
    };
    (sp..sp.saturating_add(FRAME_RECORD_SCAN))
        .step_by(8)
        .find(|&at| {
            let (Some(saved), Some(ra)) = (stack.word(at), stack.word(at.wrapping_add(8))) else {
                return false;
            };
            code(ra) && (saved == 0 || (saved > at && stack.word(saved).is_some()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack of frame-pointer frames whose code no object holds is
    /// walked by frame pointers, each frame's return address in order, and
    /// said so.
    #[test]
    fn frames_without_objects_are_walked_by_frame_pointers() {
        let base = 0x7000_0000u64;
        // Frames at base+0x10 and base+0x40; the outer one ends the chain.
        let mut words = [0u64; 16];
        words[2] = base + 0x40; // saved bp of frame 1
        words[3] = 0x40_1234; // return address into frame 2
        words[8] = 0; // saved bp of frame 2: end
        words[9] = 0x40_5678;
        let bytes = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let stack = Stack::from_bytes(base, bytes);
        let (frames, flags) =
            Unwinder::new().unwind(1, &[], &stack, (0x40_0000, base, Some(base + 0x10)));
        assert_eq!(frames, vec![0x40_0000, 0x40_1234, 0x40_5678]);
        assert_ne!(flags & blocked_flags::FRAME_POINTERS, 0);
        // A zero frame pointer ends the chain where it should.
        assert_eq!(flags & blocked_flags::INCOMPLETE, 0);
    }

    /// This test's own thread, unwound by CFI from inside a function of
    /// the test binary (its stack copied while that function runs), finds
    /// that function's callers in order.
    #[test]
    fn own_stack_unwinds_by_call_frame_information() {
        #[inline(never)]
        fn inner() -> (u64, Vec<u64>, u32) {
            let (ip, sp, bp): (u64, u64, u64);
            // SAFETY: reads registers only.
            unsafe {
                std::arch::asm!(
                    "lea {ip}, [rip]",
                    "mov {sp}, rsp",
                    "mov {bp}, rbp",
                    ip = out(reg) ip,
                    sp = out(reg) sp,
                    bp = out(reg) bp,
                );
            }
            let pid = std::process::id();
            let maps = crate::procfs::parse_maps(&crate::procfs::maps_text(pid).expect("own maps"));
            let stack = Stack::read(pid, sp, &maps);
            assert!(!stack.is_empty());
            let (frames, flags) = Unwinder::new().unwind(pid, &maps, &stack, (ip, sp, Some(bp)));
            std::hint::black_box((ip, frames, flags))
        }
        #[inline(never)]
        fn outer() -> (u64, Vec<u64>, u32) {
            std::hint::black_box(inner())
        }
        let (ip, frames, flags) = outer();
        assert_eq!(frames[0], ip);
        assert_eq!(flags & blocked_flags::FRAME_POINTERS, 0, "{frames:x?}");
        let outer_at = outer as *const () as usize as u64;
        let test_at = own_stack_unwinds_by_call_frame_information as *const () as usize as u64;
        let into = |f: u64, start: u64| f.wrapping_sub(start) < 0x200;
        let o = frames.iter().position(|f| into(*f, outer_at));
        let t = frames.iter().position(|f| into(*f, test_at));
        assert!(
            matches!((o, t), (Some(1), Some(2))),
            "outer then the test expected in {frames:x?} (outer {outer_at:x}, test {test_at:x})"
        );
    }
}
