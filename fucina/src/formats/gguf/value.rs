//! GGUF metadata values. Arrays keep their elements in one typed vector (a byte array costs
//! a byte an element, not an enum's size), so the memory a header takes stays within a
//! small factor of the file's bytes.

use crate::error::{FucinaError, Result};

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// type 0
    U8(u8),
    /// type 1
    I8(i8),
    /// type 2
    U16(u16),
    /// type 3
    I16(i16),
    /// type 4
    U32(u32),
    /// type 5
    I32(i32),
    /// type 6
    F32(f32),
    /// type 7
    Bool(bool),
    /// type 8 (kept as bytes: GGUF does not promise UTF-8)
    String(Vec<u8>),
    /// type 9
    Array(Array),
    /// type 10
    U64(u64),
    /// type 11
    I64(i64),
    /// type 12
    F64(f64),
}

/// A metadata array: elements of one GGUF type, stored compactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    /// u8 elements
    U8(Vec<u8>),
    /// i8 elements
    I8(Vec<i8>),
    /// u16 elements
    U16(Vec<u16>),
    /// i16 elements
    I16(Vec<i16>),
    /// u32 elements
    U32(Vec<u32>),
    /// i32 elements
    I32(Vec<i32>),
    /// f32 elements
    F32(Vec<f32>),
    /// bool elements
    Bool(Vec<bool>),
    /// string elements (bytes)
    String(Vec<Vec<u8>>),
    /// nested arrays
    Array(Vec<Array>),
    /// u64 elements
    U64(Vec<u64>),
    /// i64 elements
    I64(Vec<i64>),
    /// f64 elements
    F64(Vec<f64>),
}

macro_rules! each_array {
    ($a:expr, $v:ident => $e:expr) => {
        match $a {
            Array::U8($v) => $e,
            Array::I8($v) => $e,
            Array::U16($v) => $e,
            Array::I16($v) => $e,
            Array::U32($v) => $e,
            Array::I32($v) => $e,
            Array::F32($v) => $e,
            Array::Bool($v) => $e,
            Array::String($v) => $e,
            Array::Array($v) => $e,
            Array::U64($v) => $e,
            Array::I64($v) => $e,
            Array::F64($v) => $e,
        }
    };
}

impl Array {
    /// An empty array of GGUF element type `ty`.
    pub fn empty(ty: u32) -> Result<Array> {
        Ok(match ty {
            0 => Array::U8(Vec::new()),
            1 => Array::I8(Vec::new()),
            2 => Array::U16(Vec::new()),
            3 => Array::I16(Vec::new()),
            4 => Array::U32(Vec::new()),
            5 => Array::I32(Vec::new()),
            6 => Array::F32(Vec::new()),
            7 => Array::Bool(Vec::new()),
            8 => Array::String(Vec::new()),
            9 => Array::Array(Vec::new()),
            10 => Array::U64(Vec::new()),
            11 => Array::I64(Vec::new()),
            12 => Array::F64(Vec::new()),
            t => return Err(FucinaError::Format { format: "gguf", msg: format!("unknown array element type {t}") }),
        })
    }

    /// Builds an array of type `ty` from values of that type.
    ///
    /// ```
    /// use fucina::formats::gguf::{Array, Value};
    /// let a = Array::from_values(5, vec![Value::I32(1), Value::I32(-2)])?;
    /// assert_eq!(a, Array::I32(vec![1, -2]));
    /// assert!(Array::from_values(5, vec![Value::U8(1)]).is_err());
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn from_values(ty: u32, values: Vec<Value>) -> Result<Array> {
        let mut a = Array::empty(ty)?;
        for v in values {
            a.push(v)?;
        }
        Ok(a)
    }

    /// Appends `v`, which must be of the array's element type.
    pub fn push(&mut self, v: Value) -> Result<()> {
        match (self, v) {
            (Array::U8(a), Value::U8(x)) => a.push(x),
            (Array::I8(a), Value::I8(x)) => a.push(x),
            (Array::U16(a), Value::U16(x)) => a.push(x),
            (Array::I16(a), Value::I16(x)) => a.push(x),
            (Array::U32(a), Value::U32(x)) => a.push(x),
            (Array::I32(a), Value::I32(x)) => a.push(x),
            (Array::F32(a), Value::F32(x)) => a.push(x),
            (Array::Bool(a), Value::Bool(x)) => a.push(x),
            (Array::String(a), Value::String(x)) => a.push(x),
            (Array::Array(a), Value::Array(x)) => a.push(x),
            (Array::U64(a), Value::U64(x)) => a.push(x),
            (Array::I64(a), Value::I64(x)) => a.push(x),
            (Array::F64(a), Value::F64(x)) => a.push(x),
            (a, v) => {
                return Err(FucinaError::Format {
                    format: "gguf",
                    msg: format!("a value of type {} in an array of type {}", v.type_id(), a.type_id()),
                })
            }
        }
        Ok(())
    }

    /// The GGUF type id of the elements.
    pub fn type_id(&self) -> u32 {
        match self {
            Array::U8(_) => 0,
            Array::I8(_) => 1,
            Array::U16(_) => 2,
            Array::I16(_) => 3,
            Array::U32(_) => 4,
            Array::I32(_) => 5,
            Array::F32(_) => 6,
            Array::Bool(_) => 7,
            Array::String(_) => 8,
            Array::Array(_) => 9,
            Array::U64(_) => 10,
            Array::I64(_) => 11,
            Array::F64(_) => 12,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_array!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a [`Value`] (copied).
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(a) => Value::U8(*a.get(i)?),
            Array::I8(a) => Value::I8(*a.get(i)?),
            Array::U16(a) => Value::U16(*a.get(i)?),
            Array::I16(a) => Value::I16(*a.get(i)?),
            Array::U32(a) => Value::U32(*a.get(i)?),
            Array::I32(a) => Value::I32(*a.get(i)?),
            Array::F32(a) => Value::F32(*a.get(i)?),
            Array::Bool(a) => Value::Bool(*a.get(i)?),
            Array::String(a) => Value::String(a.get(i)?.clone()),
            Array::Array(a) => Value::Array(a.get(i)?.clone()),
            Array::U64(a) => Value::U64(*a.get(i)?),
            Array::I64(a) => Value::I64(*a.get(i)?),
            Array::F64(a) => Value::F64(*a.get(i)?),
        })
    }

    /// The elements as values (copied, one at a time).
    pub fn iter(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// The string elements, if this is an array of strings.
    pub fn strings(&self) -> Option<&[Vec<u8>]> {
        match self {
            Array::String(a) => Some(a),
            _ => None,
        }
    }

    /// The elements as signed integers, if this is an array of integers that fit.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        Some(match self {
            Array::U8(a) => a.iter().map(|x| *x as i64).collect(),
            Array::I8(a) => a.iter().map(|x| *x as i64).collect(),
            Array::U16(a) => a.iter().map(|x| *x as i64).collect(),
            Array::I16(a) => a.iter().map(|x| *x as i64).collect(),
            Array::U32(a) => a.iter().map(|x| *x as i64).collect(),
            Array::I32(a) => a.iter().map(|x| *x as i64).collect(),
            Array::U64(a) => a.iter().map(|x| i64::try_from(*x).ok()).collect::<Option<_>>()?,
            Array::I64(a) => a.clone(),
            _ => return None,
        })
    }

    /// The elements as f32, if this is an array of numbers.
    pub fn to_f32s(&self) -> Option<Vec<f32>> {
        match self {
            Array::F32(a) => Some(a.clone()),
            Array::F64(a) => Some(a.iter().map(|x| *x as f32).collect()),
            other => other.to_i64s().map(|v| v.into_iter().map(|x| x as f32).collect()),
        }
    }

    /// Bytes the elements take in a GGUF file (counts and lengths included).
    pub fn file_bytes(&self) -> usize {
        match self {
            Array::String(a) => a.iter().map(|s| 8 + s.len()).sum(),
            Array::Array(a) => a.iter().map(|x| 12 + x.file_bytes()).sum(),
            Array::U8(a) => a.len(),
            Array::I8(a) => a.len(),
            Array::Bool(a) => a.len(),
            Array::U16(a) => 2 * a.len(),
            Array::I16(a) => 2 * a.len(),
            Array::U32(a) => 4 * a.len(),
            Array::I32(a) => 4 * a.len(),
            Array::F32(a) => 4 * a.len(),
            Array::U64(a) => 8 * a.len(),
            Array::I64(a) => 8 * a.len(),
            Array::F64(a) => 8 * a.len(),
        }
    }
}

impl Value {
    /// The GGUF type id of the value.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(..) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// The value as an unsigned integer, if it is one.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) if v >= 0 => Some(v as u64),
            Value::I16(v) if v >= 0 => Some(v as u64),
            Value::I32(v) if v >= 0 => Some(v as u64),
            Value::I64(v) if v >= 0 => Some(v as u64),
            _ => None,
        }
    }

    /// The value as a float, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value as a UTF-8 string, if it is a valid one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value as an array, if it is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}
