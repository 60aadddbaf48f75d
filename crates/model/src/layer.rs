//! One decoder layer, as the model runs it: each part owns its weights and
//! runs on the batch in the scratch buffers, the residual stream in `s.x`.

use crate::forward::SeqInput;
use crate::weights::DecoderLayer;
use crate::{Model, ModelError, Scratch};

impl DecoderLayer {
    /// Layer `li` over the batch: attention, then the MLP, each adding its
    /// normed output to the residual stream; around them, what some Gemma
    /// variants add (Gemma 3n's AltUp streams and LAuReL, Gemma 4's
    /// experts, per-layer inputs and output scale).
    pub(crate) fn forward(
        &self,
        m: &Model,
        li: usize,
        seqs: &mut [SeqInput<'_>],
        s: &mut Scratch,
    ) -> Result<(), ModelError> {
        if let Some(altup) = &self.altup {
            altup.predict(m, s);
        }
        self.attention.forward(m, li, seqs, s)?;
        if let Some(laurel) = &self.laurel {
            laurel.forward(m, s)?;
        }
        self.mlp
            .forward(m, &m.config.layers[li], self.moe.as_ref(), s)?;
        match (&self.altup, &self.per_layer) {
            (Some(altup), per_layer) => altup.correct(m, li, per_layer.as_ref(), s)?,
            (None, Some(per_layer)) => per_layer.forward(m, li, s)?,
            (None, None) => {}
        }
        if let Some(f) = self.out_scale {
            s.x[..s.layout.batch * m.config.hidden]
                .iter_mut()
                .for_each(|v| *v *= f);
        }
        Ok(())
    }
}
