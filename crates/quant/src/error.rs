//! The one error type of this crate.

use gguf::GgmlType;

/// Why a quantization, dequantization or matrix operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The operation is not implemented for this element type.
    #[error("tensor type {0} is not supported by this operation")]
    Unsupported(GgmlType),
    /// The element count is not a whole number of blocks.
    #[error("{len} elements of {ty} is not a multiple of its block length {block}")]
    NotBlockMultiple {
        /// The element type.
        ty: GgmlType,
        /// The element count asked for.
        len: usize,
        /// The block length of `ty`.
        block: usize,
    },
    /// A byte or element buffer is smaller than the operation needs.
    #[error("{what} buffer too short: need {need}, have {have}")]
    BufferTooShort {
        /// Which buffer (`source`, `destination`, …).
        what: &'static str,
        /// How many bytes or elements are needed.
        need: usize,
        /// How many there are.
        have: usize,
    },
    /// A matrix's data does not have exactly the size its shape implies.
    #[error("matrix of {rows}x{cols} {ty} needs {need} bytes, got {have}")]
    BadMatrixSize {
        /// The element type.
        ty: GgmlType,
        /// Row count.
        rows: usize,
        /// Column count.
        cols: usize,
        /// Bytes the shape implies.
        need: usize,
        /// Bytes supplied.
        have: usize,
    },
    /// A row index past the end of a matrix.
    #[error("row {row} out of range for a matrix of {rows} rows")]
    RowOutOfRange {
        /// The row asked for.
        row: usize,
        /// Rows in the matrix.
        rows: usize,
    },
    /// Operand shapes of a matrix product disagree.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// No kernel table of that name runs on this CPU.
    #[error("no kernel set `{0}` on this CPU (this CPU runs: {available})", available = crate::kernel_sets().join(", "))]
    UnknownKernelSet(String),
    /// The process already chose another kernel table (it is chosen once,
    /// before the first product).
    #[error(
        "the kernel set is already `{chosen}`; `{wanted}` must be chosen before the first product"
    )]
    KernelSetFixed {
        /// The table in use.
        chosen: &'static str,
        /// The table asked for.
        wanted: String,
    },
    /// A size computation overflowed `usize`.
    #[error("size overflow")]
    Overflow,
}
