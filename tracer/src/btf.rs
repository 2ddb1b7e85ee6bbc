//! The kernel struct offsets the eBPF programs read (a descriptor's file, a
//! block request's device, a socket's addresses, a task's pid), found in
//! the running kernel's BTF (`/sys/kernel/btf/vmlinux`), so one build of the
//! programs works on every kernel layout. A field this kernel lacks, or whose
//! size is not the one the programs read, is left absent, and the programs
//! that need it are not attached.
//!
//! The reader is small and only answers "offset and size of `struct.path`"
//! (format: Documentation/bpf/btf.rst). It scans the kernel's 5-6 MiB of
//! BTF in milliseconds; the general-purpose parsers build every type of the
//! kernel first, which took 0.2-0.3 s per recorder start on this project's
//! machines.

use std::{
    collections::HashMap,
    io::Read as _,
    path::{Path, PathBuf},
};

use tracer_common::kernel::{KernelOffsets, NO_OFFSET};

/// Where the kernel exposes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Largest BTF file read (the kernel's is 5-6 MiB).
const MAX_BTF_BYTES: u64 = 64 << 20;

/// Errors reading the kernel's BTF.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The file could not be read.
    #[error(
        "cannot read the kernel's BTF at {path} (a kernel built without CONFIG_DEBUG_INFO_BTF?)"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than any kernel's BTF.
    #[error("{path} is larger than the {MAX_BTF_BYTES} bytes a kernel's BTF can be")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The data is not valid BTF.
    #[error("bad BTF at byte {at}: {what}")]
    Parse {
        /// Byte position.
        at: usize,
        /// What is wrong.
        what: &'static str,
    },
}

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// One type entry: where it is and its first three words.
#[derive(Clone, Copy, Debug)]
struct TypeEntry {
    /// Byte position of the entry's `struct btf_type` in the type section.
    at: usize,
    name_off: u32,
    info: u32,
    /// `size` or `type`, by kind.
    size_type: u32,
}

impl TypeEntry {
    fn kind(&self) -> u32 {
        (self.info >> 24) & 0x1f
    }

    fn vlen(&self) -> usize {
        (self.info & 0xffff) as usize
    }

    fn kind_flag(&self) -> bool {
        self.info >> 31 != 0
    }
}

/// A parsed BTF blob: every type's position, the string section, and the
/// ids of the structs and unions asked for, by name.
pub struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Index = type id (0 is void).
    entries: Vec<TypeEntry>,
    structs: HashMap<&'a str, u32>,
}

fn word(bytes: &[u8], at: usize) -> Result<u32, BtfError> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(BtfError::Parse {
            at,
            what: "truncated",
        })
}

impl<'a> Btf<'a> {
    /// Parses a BTF blob (little-endian), indexing the structs and unions
    /// named in `wanted` (the first of each name).
    pub fn parse(data: &'a [u8], wanted: &[&str]) -> Result<Self, BtfError> {
        let magic = data.get(..2).ok_or(BtfError::Parse {
            at: 0,
            what: "no header",
        })?;
        if magic != [0x9f, 0xeb] {
            return Err(BtfError::Parse {
                at: 0,
                what: "bad magic (not little-endian BTF)",
            });
        }
        let hdr_len = word(data, 4)? as usize;
        let (type_off, type_len) = (word(data, 8)? as usize, word(data, 12)? as usize);
        let (str_off, str_len) = (word(data, 16)? as usize, word(data, 20)? as usize);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off)?;
            data.get(start..start.checked_add(len)?)
        };
        let types = section(type_off, type_len).ok_or(BtfError::Parse {
            at: 8,
            what: "type section out of bounds",
        })?;
        let strings = section(str_off, str_len).ok_or(BtfError::Parse {
            at: 16,
            what: "string section out of bounds",
        })?;
        let mut btf = Self {
            types,
            strings,
            entries: vec![TypeEntry {
                at: 0,
                name_off: 0,
                info: 0,
                size_type: 0,
            }],
            structs: HashMap::new(),
        };
        let mut at = 0;
        while at < btf.types.len() {
            let e = TypeEntry {
                at,
                name_off: word(btf.types, at)?,
                info: word(btf.types, at + 4)?,
                size_type: word(btf.types, at + 8)?,
            };
            let extra = match e.kind() {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * e.vlen(),
                KIND_ENUM | KIND_FUNC_PROTO => 8 * e.vlen(),
                KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
                _ => {
                    return Err(BtfError::Parse {
                        at,
                        what: "unknown type kind",
                    });
                }
            };
            if matches!(e.kind(), KIND_STRUCT | KIND_UNION)
                && e.name_off != 0
                && let Some(name) = btf.string(e.name_off)
                && wanted.contains(&name)
            {
                // The first of a name wins (a kernel has one of each).
                let id = btf.entries.len() as u32;
                btf.structs.entry(name).or_insert(id);
            }
            btf.entries.push(e);
            at += 12 + extra;
        }
        if at != btf.types.len() {
            return Err(BtfError::Parse {
                at,
                what: "type section ends inside a type",
            });
        }
        Ok(btf)
    }

    fn string(&self, off: u32) -> Option<&'a str> {
        let rest = self.strings.get(off as usize..)?;
        let end = rest.iter().position(|b| *b == 0)?;
        std::str::from_utf8(&rest[..end]).ok()
    }

    fn entry(&self, id: u32) -> Option<TypeEntry> {
        self.entries.get(id as usize).copied().filter(|_| id != 0)
    }

    /// `id` with typedefs and qualifiers removed.
    fn resolve(&self, mut id: u32) -> Option<TypeEntry> {
        for _ in 0..32 {
            let e = self.entry(id)?;
            match e.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = e.size_type;
                }
                _ => return Some(e),
            }
        }
        None
    }

    /// Size in bytes of type `id`.
    fn size_of(&self, id: u32) -> Option<usize> {
        self.size_of_at(id, 0)
    }

    /// [`Self::size_of`], `depth` arrays deep (an array that is its own
    /// element, in damaged BTF, ends here instead of overflowing the stack).
    fn size_of_at(&self, id: u32, depth: u32) -> Option<usize> {
        if depth > 32 {
            return None;
        }
        let e = self.resolve(id)?;
        match e.kind() {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                Some(e.size_type as usize)
            }
            KIND_PTR => Some(8),
            KIND_ARRAY => {
                let elem = word(self.types, e.at + 12).ok()?;
                let n = word(self.types, e.at + 20).ok()? as usize;
                self.size_of_at(elem, depth + 1)?.checked_mul(n)
            }
            _ => None,
        }
    }

    /// (type id, byte offset) of member `name` of struct or union `e`,
    /// looking through anonymous struct and union members.
    fn member(&self, e: TypeEntry, name: &str, depth: u32) -> Option<(u32, u64)> {
        if depth > 8 || !matches!(e.kind(), KIND_STRUCT | KIND_UNION) {
            return None;
        }
        for i in 0..e.vlen() {
            let at = e.at + 12 + 12 * i;
            let name_off = word(self.types, at).ok()?;
            let ty = word(self.types, at + 4).ok()?;
            let raw = word(self.types, at + 8).ok()?;
            let (bits, bitfield) = if e.kind_flag() {
                (raw & 0xff_ffff, raw >> 24 != 0)
            } else {
                (raw, false)
            };
            if name_off == 0 {
                let inner = self.resolve(ty)?;
                if let Some((t, off)) = self.member(inner, name, depth + 1) {
                    return Some((t, u64::from(bits / 8) + off));
                }
                continue;
            }
            if self.string(name_off) == Some(name) {
                // A bitfield or a misaligned member is not a byte offset.
                return (!bitfield && bits % 8 == 0).then_some((ty, u64::from(bits / 8)));
            }
        }
        None
    }

    /// (byte offset, size) of `path` (`a.b.c`) in struct or union `ty`.
    pub fn offset_of(&self, ty: &str, path: &str) -> Option<(u64, usize)> {
        let mut id = *self.structs.get(ty)?;
        let mut offset = 0;
        for name in path.split('.') {
            let e = self.resolve(id)?;
            let (member, at) = self.member(e, name, 0)?;
            offset += at;
            id = member;
        }
        Some((offset, self.size_of(id)?))
    }
}

/// (field of [`KernelOffsets`], struct, member path, size the programs read;
/// 0 = any size of at least 4, for arrays).
type Field = (
    fn(&mut KernelOffsets) -> &mut u32,
    &'static str,
    &'static str,
    usize,
);

const FIELDS: &[Field] = &[
    (|o| &mut o.task_flags, "task_struct", "flags", 4),
    (|o| &mut o.task_pid, "task_struct", "pid", 4),
    (|o| &mut o.task_tgid, "task_struct", "tgid", 4),
    (|o| &mut o.task_exit_code, "task_struct", "exit_code", 4),
    (|o| &mut o.task_files, "task_struct", "files", 8),
    (|o| &mut o.task_mm, "task_struct", "mm", 8),
    (|o| &mut o.mm_start_code, "mm_struct", "start_code", 8),
    (|o| &mut o.mm_end_code, "mm_struct", "end_code", 8),
    (|o| &mut o.files_fdt, "files_struct", "fdt", 8),
    (|o| &mut o.fdt_max_fds, "fdtable", "max_fds", 4),
    (|o| &mut o.fdt_fd, "fdtable", "fd", 8),
    (|o| &mut o.file_inode, "file", "f_inode", 8),
    (|o| &mut o.file_private_data, "file", "private_data", 8),
    (|o| &mut o.inode_mode, "inode", "i_mode", 2),
    (|o| &mut o.inode_sb, "inode", "i_sb", 8),
    (|o| &mut o.inode_rdev, "inode", "i_rdev", 4),
    (|o| &mut o.sb_dev, "super_block", "s_dev", 4),
    (|o| &mut o.socket_sk, "socket", "sk", 8),
    (|o| &mut o.rq_bio, "request", "bio", 8),
    (|o| &mut o.rq_data_len, "request", "__data_len", 4),
    (|o| &mut o.rq_cmd_flags, "request", "cmd_flags", 4),
    (|o| &mut o.rq_q, "request", "q", 8),
    (|o| &mut o.q_disk, "request_queue", "disk", 8),
    (|o| &mut o.disk_major, "gendisk", "major", 4),
    (|o| &mut o.disk_first_minor, "gendisk", "first_minor", 4),
    (|o| &mut o.bio_bdev, "bio", "bi_bdev", 8),
    (|o| &mut o.bdev_dev, "block_device", "bd_dev", 4),
    (|o| &mut o.sk_daddr, "sock", "__sk_common.skc_daddr", 4),
    (
        |o| &mut o.sk_rcv_saddr,
        "sock",
        "__sk_common.skc_rcv_saddr",
        4,
    ),
    (|o| &mut o.sk_dport, "sock", "__sk_common.skc_dport", 2),
    (|o| &mut o.sk_num, "sock", "__sk_common.skc_num", 2),
    (|o| &mut o.sk_family, "sock", "__sk_common.skc_family", 2),
    (|o| &mut o.sk_state, "sock", "__sk_common.skc_state", 1),
    (
        |o| &mut o.sk_v6_daddr,
        "sock",
        "__sk_common.skc_v6_daddr",
        16,
    ),
    (
        |o| &mut o.sk_v6_rcv_saddr,
        "sock",
        "__sk_common.skc_v6_rcv_saddr",
        16,
    ),
    (|o| &mut o.sk_net, "sock", "__sk_common.skc_net", 8),
    (|o| &mut o.net_inum, "net", "ns.inum", 4),
    (|o| &mut o.skb_cb, "sk_buff", "cb", 0),
    (|o| &mut o.tcp_cb_seq, "tcp_skb_cb", "seq", 4),
    (|o| &mut o.tcp_total_retrans, "tcp_sock", "total_retrans", 4),
];

/// The offsets of this kernel, from [`VMLINUX_BTF`].
pub fn kernel_offsets() -> Result<KernelOffsets, BtfError> {
    let path = Path::new(VMLINUX_BTF);
    let read_err = |source| BtfError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut data = Vec::new();
    file.take(MAX_BTF_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(read_err)?;
    if data.len() as u64 > MAX_BTF_BYTES {
        return Err(BtfError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let wanted: Vec<&str> = FIELDS.iter().map(|f| f.1).collect();
    Ok(offsets(&Btf::parse(&data, &wanted)?))
}

/// The offsets of this kernel, read once per process (the agent starts a
/// session again and again; the kernel does not change under it).
pub fn kernel_offsets_cached() -> Result<KernelOffsets, &'static BtfError> {
    static OFFSETS: std::sync::OnceLock<Result<KernelOffsets, BtfError>> =
        std::sync::OnceLock::new();
    OFFSETS.get_or_init(kernel_offsets).as_ref().copied()
}

/// The offsets found in `btf`.
pub fn offsets(btf: &Btf<'_>) -> KernelOffsets {
    let mut out = KernelOffsets::ABSENT;
    for (field, ty, path, size) in FIELDS {
        let found = btf.offset_of(ty, path).filter(|(_, actual)| {
            let fits = if *size == 0 {
                *actual >= 4
            } else {
                actual == size
            };
            if !fits {
                log::debug!("BTF: {ty}.{path} is {actual} bytes, not {size}: not read");
            }
            fits
        });
        *field(&mut out) = found
            .and_then(|(at, _)| u32::try_from(at).ok())
            .unwrap_or(NO_OFFSET);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds little-endian BTF from type entries (already encoded) and a
    /// string section.
    fn blob(types: &[u32], strings: &[u8]) -> Vec<u8> {
        let type_bytes: Vec<u8> = types.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = vec![0x9f, 0xeb, 1, 0];
        for w in [
            24u32,
            0,
            type_bytes.len() as u32,
            type_bytes.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&type_bytes);
        out.extend_from_slice(strings);
        out
    }

    fn info(kind: u32, vlen: u32, kind_flag: bool) -> u32 {
        (u32::from(kind_flag) << 31) | (kind << 24) | vlen
    }

    /// `struct outer { int a; union { struct inner in; long b; }; int
    /// bits:3; const u16 c; }` with `struct inner { char x[3]; u32 y; }`
    /// and a typedef'd u16.
    fn sample() -> Btf<'static> {
        // Strings: offsets of each name.
        let strings = b"\0int\0outer\0a\0inner\0in\0b\0x\0y\0long\0char\0u16\0c\0bits\0";
        let s = |name: &str| {
            let mut at = 0;
            for part in strings.split(|b| *b == 0) {
                if part == name.as_bytes() {
                    return at as u32;
                }
                at += part.len() + 1;
            }
            panic!("no string {name}")
        };
        let types: Vec<u32> = [
            // 1: int (4 bytes)
            vec![s("int"), info(KIND_INT, 0, false), 4, 32],
            // 2: long (8 bytes)
            vec![s("long"), info(KIND_INT, 0, false), 8, 64],
            // 3: char (1 byte)
            vec![s("char"), info(KIND_INT, 0, false), 1, 8],
            // 4: char[3]
            vec![0, info(KIND_ARRAY, 0, false), 0, 3, 1, 3],
            // 5: struct inner { char x[3] @0; int y @32 bits }
            vec![
                s("inner"),
                info(KIND_STRUCT, 2, false),
                8,
                s("x"),
                4,
                0,
                s("y"),
                1,
                32,
            ],
            // 6: anonymous union { struct inner in; long b; }
            vec![
                0,
                info(KIND_UNION, 2, false),
                8,
                s("in"),
                5,
                0,
                s("b"),
                2,
                0,
            ],
            // 7: typedef u16 = 9; 8: const 7; 9: 2-byte int
            vec![s("u16"), info(KIND_TYPEDEF, 0, false), 9],
            vec![0, info(KIND_CONST, 0, false), 7],
            vec![0, info(KIND_INT, 0, false), 2, 16],
            // 10: struct outer (bitfield-encoded offsets: kind_flag)
            vec![
                s("outer"),
                info(KIND_STRUCT, 4, true),
                24,
                s("a"),
                1,
                0,
                0,
                6,
                64,
                s("bits"),
                1,
                (3 << 24) | 128,
                s("c"),
                8,
                144,
            ],
        ]
        .concat();
        let data = Box::leak(blob(&types, strings).into_boxed_slice());
        Btf::parse(data, &["outer", "inner"]).expect("valid BTF")
    }

    #[test]
    fn members_are_found_through_anonymous_unions_and_typedefs() {
        let btf = sample();
        assert_eq!(btf.offset_of("outer", "a"), Some((0, 4)));
        assert_eq!(
            btf.offset_of("outer", "b"),
            Some((8, 8)),
            "in the anonymous union"
        );
        assert_eq!(btf.offset_of("outer", "in.y"), Some((12, 4)), "a path");
        assert_eq!(
            btf.offset_of("outer", "in.x"),
            Some((8, 3)),
            "an array's size"
        );
        assert_eq!(
            btf.offset_of("outer", "c"),
            Some((18, 2)),
            "const typedef'd u16"
        );
        assert_eq!(
            btf.offset_of("outer", "bits"),
            None,
            "a bitfield has no byte offset"
        );
        assert_eq!(btf.offset_of("outer", "nope"), None);
        assert_eq!(btf.offset_of("inner", "y"), Some((4, 4)));
        assert_eq!(btf.offset_of("missing", "y"), None);
    }

    #[test]
    fn damaged_btf_is_an_error_not_a_panic() {
        let good = blob(&[1, info(KIND_INT, 0, false), 4, 32], b"\0int\0");
        assert!(Btf::parse(&good, &[]).is_ok());
        for cut in 0..good.len() {
            let _ = Btf::parse(&good[..cut], &[]);
        }
        let mut bad_kind = good.clone();
        bad_kind[24 + 7] = 31;
        assert!(matches!(
            Btf::parse(&bad_kind, &[]),
            Err(BtfError::Parse {
                what: "unknown type kind",
                ..
            })
        ));
        // A struct claiming more members than the section holds.
        let lying = blob(&[1, info(KIND_STRUCT, 9, false), 4], b"\0s\0");
        assert!(Btf::parse(&lying, &[]).is_err());
        // An array whose element is itself: no size, and no stack overflow.
        let looped = blob(
            &[
                1,
                info(KIND_STRUCT, 1, false),
                4,
                3,
                2,
                0,
                0,
                info(KIND_ARRAY, 0, false),
                0,
                2,
                1,
                2,
            ],
            b"\0s\0m\0",
        );
        let btf = Btf::parse(&looped, &["s"]).expect("parses");
        assert_eq!(btf.offset_of("s", "m"), None);
        assert!(Btf::parse(b"\x9f\xeb\x01\x00", &[]).is_err());
        assert!(Btf::parse(b"garbage!", &[]).is_err());
    }

    /// On this machine's kernel every field is found, with the sizes the
    /// programs read (a kernel without BTF skips: nothing to check).
    #[test]
    fn this_kernel_has_every_field() {
        if !Path::new(VMLINUX_BTF).exists() {
            eprintln!("skipped: no {VMLINUX_BTF}");
            return;
        }
        let o = kernel_offsets().expect("the kernel's BTF parses");
        assert!(o.has_task() && o.has_files() && o.has_socket(), "{o:?}");
        assert!(o.has_block() && o.has_tcp(), "{o:?}");
        // The first field of each, for decades.
        assert_eq!(o.rq_q, 0, "request.q");
        assert_eq!(o.inode_mode, 0, "inode.i_mode");
        assert_eq!(o.tcp_cb_seq, 0, "tcp_skb_cb.seq");
        assert_eq!(o.sk_daddr, 0, "skc_daddr opens sock_common");
    }
}
