//! What a client asks of the slots by hand, as llama.cpp's `/slots` does:
//! each slot's view, and one slot's state taken out (to save), put in (a
//! restored file) or erased. Served by the scheduler thread between rounds,
//! so a slot is never touched while it computes; the files themselves are
//! written and read by the handler, off this thread.

use super::slot::{save_unsaved, Slot};
use super::SlotCache;
use crate::error::ApiError;
use engine::SavedPrompt;
use tokio::sync::oneshot;

/// What is asked of the slots.
#[derive(Debug)]
pub enum SlotAction {
    /// Every slot's view.
    List,
    /// A change to the slot of this number.
    On(usize, SlotChange),
}

/// What is asked of one slot.
#[derive(Debug)]
pub enum SlotChange {
    /// A copy of its state.
    Save,
    /// It to hold this state (its part before any media), computed with
    /// these adapters.
    Restore(SavedPrompt, engine::Adapters),
    /// It emptied.
    Erase,
}

/// What the scheduler answers.
#[derive(Debug)]
pub enum SlotAnswer {
    /// Every slot's view.
    Slots(Vec<SlotView>),
    /// The slot's state and the key of the adapters it was computed with
    /// ([`engine::Adapters::key`]).
    Saved(SavedPrompt, Vec<u8>),
    /// Tokens the slot now holds from a restored state.
    Restored(usize),
    /// Tokens the slot held before it was emptied.
    Erased(usize),
}

/// One slot as `GET /slots` shows it.
#[derive(Debug, Clone, Copy)]
pub struct SlotView {
    /// Its number.
    pub id: usize,
    /// Whether a request runs in it.
    pub is_processing: bool,
}

/// One request about a slot, with where its answer goes.
#[derive(Debug)]
pub struct SlotRequest {
    /// What is asked.
    pub action: SlotAction,
    /// The asking caller ([`super::Job::cache_scope`]): a slot holding
    /// another caller's conversation is not saved or erased for it.
    pub caller: Option<[u8; 32]>,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Result<SlotAnswer, ApiError>>,
}

/// Answers `request` from `slots` (`cache`: where a slot's finished state
/// goes before a restore replaces it).
pub(super) fn serve(slots: &mut [Slot], cache: Option<&SlotCache>, request: SlotRequest) {
    let SlotRequest {
        action,
        caller,
        reply,
    } = request;
    let answer = match action {
        SlotAction::List => Ok(SlotAnswer::Slots(
            slots
                .iter()
                .enumerate()
                .map(|(id, s)| SlotView {
                    id,
                    is_processing: s.active.is_some(),
                })
                .collect(),
        )),
        SlotAction::On(slot, change) => match slots.get_mut(slot) {
            Some(s) => act(s, cache, change, caller),
            None => Err(ApiError::bad_param(
                "id_slot",
                format!(
                    "There is no slot {slot}: this model has {} (0 to {}).",
                    slots.len(),
                    slots.len().saturating_sub(1)
                ),
            )),
        },
    };
    let _ = reply.send(answer);
}

/// Saves, restores or erases one idle slot's state.
fn act(
    slot: &mut Slot,
    cache: Option<&SlotCache>,
    change: SlotChange,
    caller: Option<[u8; 32]>,
) -> Result<SlotAnswer, ApiError> {
    if slot.active.is_some() {
        return Err(ApiError::unavailable(
            "The slot is busy with a request; try again when it is done.",
            1,
        ));
    }
    let others = slot.scope != caller && !slot.session.tokens().is_empty();
    match change {
        SlotChange::Save | SlotChange::Erase if others => Err(ApiError::forbidden(
            "The slot holds another API key's conversation.",
        )),
        SlotChange::Save => Ok(SlotAnswer::Saved(
            slot.session.save_prompt(),
            slot.session.adapters().key(),
        )),
        SlotChange::Erase => {
            let held = slot.session.tokens().len();
            slot.session.reset();
            slot.unsaved = false;
            Ok(SlotAnswer::Erased(held))
        }
        SlotChange::Restore(saved, adapters) => {
            save_unsaved(slot, cache);
            // Media are not in the file (only their keys): the state serves
            // up to the first of them.
            let keep = saved.media.first().map_or(saved.tokens.len(), |m| m.pos);
            slot.scope = caller;
            slot.session.use_adapters(&adapters);
            slot.session
                .load_prompt(&saved, keep, &[])
                .map_err(|e| ApiError::bad_param("filename", format!("Cannot restore it: {e}")))?;
            Ok(SlotAnswer::Restored(keep))
        }
    }
}
