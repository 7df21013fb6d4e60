//! The CPU kernel path: which FP32 kernels libtorch picks on this machine.
//!
//! libtorch 2.13.0 chooses its GEMM and vectorised loops by instruction set, so the same
//! trainer gives one logical-state root per kernel path (README, "train"). Evidence
//! recorded on one path is reproduced byte for byte only on that path; this names it as
//! the CPU vendor followed by the instruction-set flags that select a kernel, in the fixed
//! order of [`KERNEL_FLAGS`], e.g. `AuthenticAMD avx2 fma avx512f avx512bw avx512vl
//! avx512_vnni avx512_bf16`.
//!
//! Invariant: [`of_cpuinfo`] only ever returns a path [`is_well_formed`] accepts.

/// The `/proc/cpuinfo` flags that select a libtorch FP32 kernel, in the order they are
/// written.
pub const KERNEL_FLAGS: [&str; 9] = [
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
];

/// The vendor written when `/proc/cpuinfo` names none (or an unusable one).
pub const UNKNOWN_VENDOR: &str = "unknown-vendor";

/// Longest vendor id accepted (x86 vendor strings are 12 bytes).
const MAX_VENDOR_BYTES: usize = 32;

/// The kernel path `cpuinfo` (the text of `/proc/cpuinfo`) describes, from its first
/// `vendor_id` and `flags` lines.
pub fn of_cpuinfo(cpuinfo: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim())
        })
    };
    let vendor = field("vendor_id")
        .filter(|vendor| is_vendor(vendor))
        .unwrap_or(UNKNOWN_VENDOR);
    let flags: Vec<&str> = field("flags").unwrap_or("").split_whitespace().collect();
    let mut path = vec![vendor];
    path.extend(KERNEL_FLAGS.iter().filter(|flag| flags.contains(flag)));
    path.join(" ")
}

/// This machine's kernel path, from `/proc/cpuinfo` (only the vendor, unknown, when it
/// cannot be read).
pub fn this_machine() -> String {
    of_cpuinfo(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
}

/// Whether `path` is one [`of_cpuinfo`] could have written: a vendor id (ASCII letters,
/// digits, `-` or `_`, at most 32 bytes), then distinct [`KERNEL_FLAGS`] in their order,
/// single spaces between.
pub fn is_well_formed(path: &str) -> bool {
    let mut words = path.split(' ');
    if !words.next().is_some_and(is_vendor) {
        return false;
    }
    let mut next_flag = 0;
    for word in words {
        match KERNEL_FLAGS[next_flag..]
            .iter()
            .position(|flag| *flag == word)
        {
            Some(offset) => next_flag += offset + 1,
            None => return false,
        }
    }
    true
}

fn is_vendor(vendor: &str) -> bool {
    !vendor.is_empty()
        && vendor.len() <= MAX_VENDOR_BYTES
        && vendor
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPYC: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
        flags\t\t: fpu sse2 avx2 fma avx512f avx512dq avx512bw avx512vl avx512_bf16 \
        avx512_vnni\nprocessor\t: 1\nvendor_id\t: Other\n";

    #[test]
    fn the_path_is_the_vendor_and_the_kernel_flags_in_their_order() {
        let path = of_cpuinfo(EPYC);
        assert_eq!(
            path,
            "AuthenticAMD avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16"
        );
        assert!(is_well_formed(&path));
    }

    #[test]
    fn no_cpuinfo_gives_the_unknown_vendor_alone() {
        assert_eq!(of_cpuinfo(""), UNKNOWN_VENDOR);
        assert_eq!(of_cpuinfo("vendor_id : a b\n"), UNKNOWN_VENDOR);
        assert!(is_well_formed(UNKNOWN_VENDOR));
        assert!(is_well_formed(&this_machine()));
    }

    #[test]
    fn malformed_paths_are_refused() {
        for path in [
            "",
            " avx2",
            "GenuineIntel  avx2",
            "GenuineIntel fma avx2",
            "GenuineIntel avx2 avx2",
            "GenuineIntel sse2",
            "GenuineIntel avx2 ",
            "Genuine/Intel avx2",
            &"x".repeat(33),
        ] {
            assert!(!is_well_formed(path), "{path:?}");
        }
        assert!(is_well_formed("GenuineIntel fma amx_tile"));
    }
}
