//! A strict reader of the protobuf wire format: the fields of one message,
//! each with the byte range it occupies, nothing decoded beyond that.
//!
//! Ranges are what the passes need: a pass that changes one scalar in place
//! writes to `range` and leaves every other byte of the message alone.

use std::ops::Range;

use super::GraphError;

/// One field of a message, as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub number: u32,
    pub value: Value,
}

/// A field's payload: its decoded scalar or the range of its bytes, relative
/// to the message the [`Fields`] iterator walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Wire type 0. `range` covers the varint's bytes.
    Varint { value: u64, range: Range<usize> },
    /// Wire type 1.
    Fixed64(Range<usize>),
    /// Wire type 2: a nested message, a string, bytes or a packed array.
    Bytes(Range<usize>),
    /// Wire type 5.
    Fixed32(Range<usize>),
}

/// The fields of one serialized message, in wire order. Yields an error
/// (and then stops) at the first byte that is not valid wire format: a
/// truncated field, an overlong varint, field number 0, a group or an
/// unknown wire type. Proto3 messages (all of TensorFlow's) never use groups.
pub struct Fields<'a> {
    message: &'a [u8],
    at: usize,
    failed: bool,
}

pub fn fields(message: &[u8]) -> Fields<'_> {
    Fields { message, at: 0, failed: false }
}

impl Fields<'_> {
    /// Where the next field starts (its tag), relative to the message.
    pub fn offset(&self) -> usize {
        self.at
    }

    fn varint(&mut self) -> Result<u64, GraphError> {
        let start = self.at;
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte =
                *self.message.get(self.at).ok_or(GraphError::Malformed { offset: start, what: "truncated varint" })?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(GraphError::Malformed { offset: start, what: "varint longer than 10 bytes" })
    }

    fn take(&mut self, len: u64, what: &'static str) -> Result<Range<usize>, GraphError> {
        let start = self.at;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| start.checked_add(len))
            .filter(|&end| end <= self.message.len())
            .ok_or(GraphError::Malformed { offset: start, what })?;
        self.at = end;
        Ok(start..end)
    }

    fn field(&mut self) -> Result<Field, GraphError> {
        let tag_at = self.at;
        let tag = self.varint()?;
        let number = u32::try_from(tag >> 3)
            .ok()
            .filter(|&n| n != 0 && n < 1 << 29)
            .ok_or(GraphError::Malformed { offset: tag_at, what: "invalid field number" })?;
        let value = match tag & 7 {
            0 => {
                let start = self.at;
                let value = self.varint()?;
                Value::Varint { value, range: start..self.at }
            }
            1 => Value::Fixed64(self.take(8, "truncated fixed64")?),
            2 => {
                let len = self.varint()?;
                Value::Bytes(self.take(len, "length-delimited field runs past the end")?)
            }
            5 => Value::Fixed32(self.take(4, "truncated fixed32")?),
            3 | 4 => return Err(GraphError::Malformed { offset: tag_at, what: "group (not used by proto3)" }),
            _ => return Err(GraphError::Malformed { offset: tag_at, what: "unknown wire type" }),
        };
        Ok(Field { number, value })
    }
}

impl Iterator for Fields<'_> {
    type Item = Result<Field, GraphError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.message.len() {
            return None;
        }
        let field = self.field();
        self.failed = field.is_err();
        Some(field)
    }
}

/// The fields of `message` each with the bytes it occupies on the wire, tag
/// included: what a rewrite copies through unchanged.
pub fn raw_fields(message: &[u8]) -> impl Iterator<Item = Result<(Field, &[u8]), GraphError>> {
    let mut fields = fields(message);
    std::iter::from_fn(move || {
        let start = fields.offset();
        let field = fields.next()?;
        Some(field.map(|field| (field, &message[start..fields.offset()])))
    })
}

/// Bytes borrowed from a message, with their offset in it (errors and
/// patches are reported relative to the enclosing message).
pub type Located<'a> = (&'a [u8], usize);

/// The bytes of a length-delimited field, or an error naming `what` if the
/// field has another wire type (a message TensorFlow could not parse either).
pub fn bytes<'a>(message: &'a [u8], field: &Field, what: &'static str) -> Result<Located<'a>, GraphError> {
    match &field.value {
        Value::Bytes(range) => Ok((&message[range.clone()], range.start)),
        Value::Varint { range, .. } | Value::Fixed64(range) | Value::Fixed32(range) => {
            Err(GraphError::Malformed { offset: range.start, what })
        }
    }
}

// ------------------------------------------------------------- writing

/// Appends `value` as a varint.
pub fn put_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends field `number` with a varint payload.
pub fn put_varint_field(number: u32, value: u64, out: &mut Vec<u8>) {
    put_varint(u64::from(number) << 3, out);
    put_varint(value, out);
}

/// Appends field `number` with a length-delimited payload (a string, bytes
/// or a nested message).
pub fn put_bytes_field(number: u32, payload: &[u8], out: &mut Vec<u8>) {
    put_varint(u64::from(number) << 3 | 2, out);
    put_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(message: &[u8]) -> Result<Vec<Field>, GraphError> {
        fields(message).collect()
    }

    #[test]
    fn reads_every_wire_type_with_its_range() {
        // 1: varint 300, 2: "hi", 3: fixed64, 4: fixed32
        let message = [0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4];
        let fields = all(&message).unwrap();
        assert_eq!(fields[0], Field { number: 1, value: Value::Varint { value: 300, range: 1..3 } });
        assert_eq!(fields[1], Field { number: 2, value: Value::Bytes(5..7) });
        assert_eq!(fields[2], Field { number: 3, value: Value::Fixed64(8..16) });
        assert_eq!(fields[3], Field { number: 4, value: Value::Fixed32(17..21) });
    }

    #[test]
    fn rejects_what_a_protobuf_parser_rejects() {
        for bad in [
            &[0x12, 5, b'a'][..],                                                          // length past the end
            &[0x08][..],                                                                   // missing varint
            &[0x08, 0x80][..],                                                             // truncated varint
            &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..], // 11-byte varint
            &[0x00, 0x00][..],                                                             // field 0
            &[0x0b][..],                                                                   // start group
            &[0x0e][..],                                                                   // wire type 6
            &[0x19, 1, 2][..],                                                             // truncated fixed64
            &[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f][..],             // huge length
        ] {
            assert!(all(bad).is_err(), "{bad:02x?} should be malformed");
        }
    }

    #[test]
    fn written_fields_read_back() {
        let mut message = Vec::new();
        put_varint_field(3, 300, &mut message);
        put_bytes_field(2, b"hi", &mut message);
        put_varint_field(1u32 << 28, u64::MAX, &mut message);
        let fields = all(&message).unwrap();
        assert_eq!(fields[0], Field { number: 3, value: Value::Varint { value: 300, range: 1..3 } });
        assert_eq!(fields[1], Field { number: 2, value: Value::Bytes(5..7) });
        assert!(matches!(fields[2], Field { number: 268_435_456, value: Value::Varint { value: u64::MAX, .. } }));
    }

    #[test]
    fn raw_fields_cover_the_message_exactly() {
        let message = [0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x25, 1, 2, 3, 4];
        let raw: Vec<&[u8]> = raw_fields(&message).map(|f| f.unwrap().1).collect();
        assert_eq!(raw, [&message[..3], &message[3..7], &message[7..]]);
        assert!(raw_fields(&[0x12, 5, b'a']).next().unwrap().is_err());
    }

    #[test]
    fn stops_after_the_first_error() {
        let mut it = fields(&[0x0b, 0x08, 1]);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }
}
