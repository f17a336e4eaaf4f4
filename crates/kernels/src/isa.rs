//! Run-time choice of the instruction set. All paths produce identical bits; they differ
//! only in speed.

/// Kernel instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
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
    const ALL: [Isa; 4] = [Isa::Avx512Vnni, Isa::AvxVnni, Isa::Avx2, Isa::Scalar];

    /// The fastest instruction set this CPU supports.
    pub fn detect() -> Isa {
        Self::ALL
            .into_iter()
            .find(|isa| isa.is_available())
            .unwrap_or(Isa::Scalar)
    }

    /// Whether this CPU (and this build's target architecture) can run `self`.
    pub fn is_available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
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
