//! Run-time choice of the instruction set. All paths produce identical bits; they differ
//! only in speed.

/// Kernel instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512 VNNI, with AMX tiles (`tdpbsud`) for matmuls of several rows (Intel
    /// Sapphire Rapids and later, where Linux grants the tile state).
    Amx,
    /// AVX-512 with VNNI: 512-bit `vpdpbusd`.
    Avx512Vnni,
    /// AVX2 with AVX-VNNI (VEX-encoded 256-bit `vpdpbusd`).
    AvxVnni,
    /// AVX2 + FMA without VNNI (`vpmaddubsw` + `vpmaddwd`).
    Avx2,
    /// Portable Rust.
    Scalar,
}

impl Isa {
    /// Every variant, fastest first.
    const ALL: [Isa; 5] = [
        Isa::Amx,
        Isa::Avx512Vnni,
        Isa::AvxVnni,
        Isa::Avx2,
        Isa::Scalar,
    ];

    /// The fastest instruction set this CPU supports.
    pub fn detect() -> Isa {
        Self::ALL
            .into_iter()
            .find(|isa| isa.is_available())
            .unwrap_or(Isa::Scalar)
    }

    /// The instruction set executors use by default: `SPECDEC_ISA` (a [`Isa::name`]) where
    /// it is set and available here, else [`Isa::detect`]. A value that names no path or
    /// one this CPU lacks is reported on stderr once and ignored. For comparing paths on one
    /// machine (`SPECDEC_ISA=avx512vnni` runs without AMX tiles); the outputs are the same
    /// bits either way.
    pub fn chosen() -> Isa {
        static CHOSEN: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let Ok(name) = std::env::var("SPECDEC_ISA") else {
                return Isa::detect();
            };
            match Self::ALL.into_iter().find(|i| i.name() == name) {
                Some(isa) if isa.is_available() => isa,
                found => {
                    let why = if found.is_some() {
                        "is not available on this CPU"
                    } else {
                        "names no kernel path (amx, avx512vnni, avxvnni, avx2, scalar)"
                    };
                    eprintln!("SPECDEC_ISA={name} {why}; using {}", Isa::detect().name());
                    Isa::detect()
                }
            }
        })
    }

    /// Whether this CPU (and this build's target architecture) can run `self`.
    pub fn is_available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Isa::Amx => Isa::Avx512Vnni.is_available() && crate::simd::amx_usable(),
                // Its kernels also use FMA and, for odd shapes, the AVX2 paths.
                Isa::Avx512Vnni => {
                    has!("avx512f")
                        && has!("avx512bw")
                        && has!("avx512vl")
                        && has!("avx512vnni")
                        && has!("avx2")
                        && has!("fma")
                        && has!("f16c")
                }
                // F16C widens the packed f16 scales (every AVX2 CPU has it).
                Isa::AvxVnni => has!("avx2") && has!("fma") && has!("f16c") && has!("avxvnni"),
                Isa::Avx2 => has!("avx2") && has!("fma") && has!("f16c"),
                Isa::Scalar => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Isa::Scalar
        }
    }

    /// All instruction sets available here, fastest first (always ends with `Scalar`).
    pub fn available() -> Vec<Isa> {
        Self::ALL.into_iter().filter(|i| i.is_available()).collect()
    }

    /// A short stable name, e.g. for logs and benchmark tables.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Amx => "amx",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx2 => "avx2",
            Isa::Scalar => "scalar",
        }
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
