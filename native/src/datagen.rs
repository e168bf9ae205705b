//! The `datagen` source's events built as a compact batch: the same pure function of
//! (seed, partition, sequence number) as `DatagenSource.event`, which stays the reference (a
//! property test holds the two equal event for event).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::batch::{Event, EventBatch, Position, Value};

/// splitmix64, as `cdcflow.sources.datagen.source._mix` computes it on 64-bit ints.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// When each event of a read happens: interpolated over the read's span, or paced by `rate`.
enum Clock {
    Span {
        start_seq: i64,
        start_ts: i64,
        end_seq: i64,
        end_ts: i64,
    },
    Rate {
        epoch_us: i64,
        rate: f64,
    },
}

#[pyclass(frozen, module = "cdcflow._native")]
pub struct DatagenPlan {
    seed_mix: u64,
    partitions: i64,
    keys_per_partition: u64,
    tables: i64,
    /// `(limit, op)` over draws in [0, 1_000_000): the first limit above the draw decides.
    thresholds: Vec<(u64, u8)>,
    /// Values share the pool and the names (no copy per event).
    payload_pool: Arc<str>,
    names: Vec<Arc<str>>,
    event_size: usize,
    payload_starts: u64,
}

impl DatagenPlan {
    fn op_of(&self, draw: u64) -> u8 {
        for (limit, op) in &self.thresholds {
            if draw < *limit {
                return *op;
            }
        }
        self.thresholds.last().map(|(_, op)| *op).unwrap_or(b'c')
    }

    fn time_of(&self, clock: &Clock, seq: i64) -> i64 {
        match *clock {
            // int(start_ts + (end_ts - start_ts) * (seq - start_seq) / span): the product is
            // exact below 2**53 (the caller checks), so the quotient rounds as Python's does.
            Clock::Span {
                start_seq,
                start_ts,
                end_seq,
                end_ts,
            } => {
                let product = ((end_ts - start_ts) * (seq - start_seq)) as f64;
                (start_ts as f64 + product / (end_seq - start_seq) as f64) as i64
            }
            // int(epoch_us + seq * partitions / rate * 1e6)
            Clock::Rate { epoch_us, rate } => (epoch_us as f64 + (seq * self.partitions) as f64 / rate * 1e6) as i64,
        }
    }
}

#[pymethods]
impl DatagenPlan {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed_mix: u64,
        partitions: i64,
        keys_per_partition: u64,
        tables: i64,
        thresholds: Vec<(u64, String)>,
        payload_pool: String,
        event_size: usize,
    ) -> PyResult<Self> {
        if !payload_pool.is_ascii() || payload_pool.len() < 2 * event_size + 1 || payload_pool.len() > u32::MAX as usize
        {
            return Err(PyValueError::new_err(
                "the payload pool is 2 * event_size + 1 ASCII characters",
            ));
        }
        if partitions < 1 || tables < 1 || keys_per_partition < 1 {
            return Err(PyValueError::new_err(
                "partitions, tables and keys per partition are positive",
            ));
        }
        let thresholds = thresholds
            .into_iter()
            .map(|(limit, op)| match op.as_str() {
                "c" | "u" | "d" => Ok((limit, op.as_bytes()[0])),
                _ => Err(PyValueError::new_err(format!("unknown op {op:?}"))),
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(DatagenPlan {
            seed_mix,
            partitions,
            keys_per_partition,
            tables,
            thresholds,
            payload_pool: Arc::from(payload_pool),
            names: (0..1000).map(|n| Arc::from(format!("customer-{n}"))).collect(),
            event_size,
            payload_starts: event_size as u64 + 1,
        })
    }

    /// Events `first_seq..=last_seq` of partition `partition_index` (named `partition`), their
    /// times from `(start_seq, start_ts, end_seq, end_ts)` or, with `rate`, from `epoch_us`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (partition_index, partition, first_seq, last_seq, span, epoch_us, rate, ts_ms))]
    fn batch(
        &self,
        partition_index: i64,
        partition: String,
        first_seq: i64,
        last_seq: i64,
        span: (i64, i64, i64, i64),
        epoch_us: i64,
        rate: Option<f64>,
        ts_ms: i64,
    ) -> PyResult<EventBatch> {
        let clock = match rate {
            Some(rate) => Clock::Rate { epoch_us, rate },
            None => {
                let (start_seq, start_ts, end_seq, end_ts) = span;
                let widest = (end_ts - start_ts).unsigned_abs() as u128 * (end_seq - start_seq).unsigned_abs() as u128;
                if end_seq <= start_seq || widest >= 1 << 53 {
                    return Err(PyValueError::new_err(
                        "a span the compiled datagen does not time exactly",
                    ));
                }
                Clock::Span {
                    start_seq,
                    start_ts,
                    end_seq,
                    end_ts,
                }
            }
        };
        let count = (last_seq - first_seq + 1).max(0) as usize;
        let mut events = Vec::with_capacity(count);
        for seq in first_seq..=last_seq {
            let ts_us = self.time_of(&clock, seq);
            let global_id = (seq - 1) * self.partitions + partition_index;
            let h = mix(global_id as u64 ^ self.seed_mix);
            let key_id = partition_index + self.partitions * (h % self.keys_per_partition) as i64;
            let table = (key_id % self.tables) as u16;
            let op = self.op_of((h >> 24) % 1_000_000);
            let start = ((h >> 32) % self.payload_starts) as usize;
            let name = &self.names[((h >> 8) % 1000) as usize];
            let amount = ((h >> 16) % 10_000_000) as f64 / 100.0;
            let payload = (start as u32, (start + self.event_size) as u32);
            let row = |amount: f64, updated_at_us: i64| {
                vec![
                    Value::Long(key_id),
                    Value::Long(global_id),
                    Value::Shared(name.clone()),
                    Value::Double(amount),
                    Value::Slice(self.payload_pool.clone(), payload.0, payload.1),
                    Value::Long(updated_at_us),
                ]
            };
            let (before, after) = match op {
                b'c' => (None, Some(row(amount, ts_us))),
                b'u' => (Some(row(amount / 2.0, ts_us - 1)), Some(row(amount, ts_us))),
                _ => (Some(row(amount, ts_us)), None),
            };
            events.push(Event {
                op,
                table,
                key: vec![Value::Long(key_id)],
                before,
                after,
                position: Position::Text(format!("{{\"seq\":{seq}}}")),
                ts_us,
                headers: None,
            });
        }
        Ok(EventBatch {
            events,
            partition,
            ts_ms,
            snapshot: false,
        })
    }
}
