//! Recovering instructions from prompt text.

use super::Instruction;

/// The instructions a prompt states.
pub fn extract(_prompt: &str) -> Vec<Instruction> {
    Vec::new()
}
