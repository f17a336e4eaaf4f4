//! A zero-initialised byte buffer with 64-byte (cache line / zmm) alignment, or 2 MiB
//! alignment plus a transparent-huge-page hint for buffers of 2 MiB or more: the packed
//! weights are streamed once per forward, and huge pages cut TLB misses on that stream.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

const LINE: usize = 64;
const HUGE: usize = 2 << 20;

/// Owned, aligned, zeroed bytes. Length is fixed at creation.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Box<[u8]>); shared access only
// hands out `&[u8]`, mutation needs `&mut self`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` only allows reads.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes. Panics only if the allocator fails (like `Vec`).
    pub(crate) fn zeroed(len: usize) -> Self {
        let align = if len >= HUGE { HUGE } else { LINE };
        let size = len.max(1);
        let layout = Layout::from_size_align(size, align).expect("buffer size overflows");
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        if align == HUGE {
            advise_huge(ptr.as_ptr(), size);
        }
        // SAFETY: `ptr` is valid for `size` bytes we own; zeroing after the advice lets the
        // OS back the fresh range with huge pages on first touch.
        unsafe { ptr.as_ptr().write_bytes(0, size) };
        AlignedBuf { ptr, len, layout }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation holds at least `len` initialised (zeroed) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(target_os = "linux")]
fn advise_huge(ptr: *mut u8, size: usize) {
    // SAFETY: the range is one allocation we own; MADV_HUGEPAGE is only a hint and its
    // failure (e.g. THP disabled) is harmless, so the result is ignored.
    unsafe {
        libc::madvise(ptr.cast(), size, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_ptr: *mut u8, _size: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [0, 1, 63, 64, 1000, 5 << 20] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_slice().len(), len);
            assert_eq!(b.as_slice().as_ptr() as usize % LINE, 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
        assert_eq!(
            AlignedBuf::zeroed(5 << 20).as_slice().as_ptr() as usize % HUGE,
            0
        );
    }
}
