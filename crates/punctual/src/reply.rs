//! Reading script replies: arrays of integers and bulk strings.

use redis::Value;

use crate::error::{Error, Result};

pub(crate) struct Reply {
    op: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Reply {
    /// An array reply (nil counts as empty).
    pub(crate) fn new(op: &'static str, v: Value) -> Result<Self> {
        let items = match v {
            Value::Array(items) | Value::Set(items) => items,
            Value::Nil => Vec::new(),
            other => {
                return Err(Error::protocol(
                    op,
                    format!("expected an array, got {other:?}"),
                ))
            }
        };
        Ok(Reply {
            op,
            items: items.into_iter(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    fn next(&mut self) -> Result<Value> {
        self.items
            .next()
            .ok_or_else(|| Error::protocol(self.op, "reply too short"))
    }

    pub(crate) fn int(&mut self) -> Result<i64> {
        match self.next()? {
            Value::Int(i) => Ok(i),
            Value::BulkString(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::protocol(self.op, "expected an integer")),
            Value::Nil => Ok(0),
            other => Err(Error::protocol(
                self.op,
                format!("expected an integer, got {other:?}"),
            )),
        }
    }

    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>> {
        match self.next()? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.into_bytes()),
            Value::Int(i) => Ok(i.to_string().into_bytes()),
            Value::Nil => Ok(Vec::new()),
            other => Err(Error::protocol(
                self.op,
                format!("expected a string, got {other:?}"),
            )),
        }
    }

    pub(crate) fn string(&mut self) -> Result<String> {
        self.bytes()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    pub(crate) fn array(&mut self) -> Result<Reply> {
        let v = self.next()?;
        Reply::new(self.op, v)
    }
}
