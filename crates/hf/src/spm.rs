//! The few fields of a SentencePiece `tokenizer.model` a GGUF vocabulary
//! needs, read from its protobuf encoding.
//!
//! `ModelProto` field 1 is the repeated `SentencePiece { piece = 1 (string),
//! score = 2 (float), type = 3 (enum) }`. Everything else (trainer and
//! normalizer specs) is skipped by wire type.

/// One vocabulary entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Piece {
    pub text: String,
    pub score: f32,
    /// SentencePiece's type enum, which GGUF's `token_type` shares:
    /// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub kind: i32,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or("field runs past the end")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next (field number, wire type), or `None` at the end.
    fn key(&mut self) -> Result<Option<(u64, u8)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let k = self.varint()?;
        Ok(Some((k >> 3, (k & 7) as u8)))
    }

    fn skip(&mut self, wire: u8) -> Result<(), String> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.bytes(8).map(drop),
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                self.bytes(n).map(drop)
            }
            5 => self.bytes(4).map(drop),
            w => Err(format!("unsupported wire type {w}")),
        }
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
        self.bytes(n)
    }
}

fn parse_piece(buf: &[u8]) -> Result<Piece, String> {
    let mut r = Reader { buf, pos: 0 };
    let mut piece = Piece {
        text: String::new(),
        score: 0.0,
        kind: 1,
    };
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 2) => {
                piece.text = String::from_utf8(r.len_delimited()?.to_vec())
                    .map_err(|_| "a piece is not UTF-8")?
            }
            (2, 5) => {
                let b = r.bytes(4)?;
                piece.score = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
            (3, 0) => piece.kind = r.varint()? as i32,
            (_, w) => r.skip(w)?,
        }
    }
    Ok(piece)
}

/// The pieces of a serialized `ModelProto`, in id order.
pub(crate) fn parse_model(buf: &[u8]) -> Result<Vec<Piece>, String> {
    let mut r = Reader { buf, pos: 0 };
    let mut pieces = Vec::new();
    while let Some((field, wire)) = r.key()? {
        if field == 1 && wire == 2 {
            pieces.push(parse_piece(r.len_delimited()?)?);
        } else {
            r.skip(wire)?;
        }
    }
    if pieces.is_empty() {
        return Err("no pieces: not a SentencePiece model".into());
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece_bytes(text: &str, score: f32, kind: u8) -> Vec<u8> {
        let mut p = vec![0x0a, text.len() as u8];
        p.extend_from_slice(text.as_bytes());
        p.push(0x15);
        p.extend_from_slice(&score.to_le_bytes());
        p.extend_from_slice(&[0x18, kind]);
        let mut out = vec![0x0a, p.len() as u8];
        out.extend(p);
        out
    }

    #[test]
    fn reads_pieces_and_skips_other_fields() {
        let mut buf = piece_bytes("<unk>", 0.0, 2);
        // field 2 (trainer spec), length-delimited: skipped.
        buf.extend_from_slice(&[0x12, 3, 1, 2, 3]);
        buf.extend(piece_bytes("▁a", -1.5, 1));
        let pieces = parse_model(&buf).unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].kind, 2);
        assert_eq!(pieces[1].text, "▁a");
        assert_eq!(pieces[1].score, -1.5);
    }

    #[test]
    fn truncated_input_is_an_error() {
        let buf = piece_bytes("abc", 1.0, 1);
        for cut in 1..buf.len() {
            assert!(parse_model(&buf[..cut]).is_err(), "cut at {cut}");
        }
        assert!(parse_model(&[]).is_err());
    }
}
