//! What the interval recorder's locking costs a request when every worker thread of a
//! many-core agent records at once: the same work (a closed request's two records, as
//! `runner::session` makes them) on 1..=N threads, against a recorder with one stripe and
//! one with a stripe per core, and the ticker swapping every 100 ms as it would each interval.
//! Prints nanoseconds of wall time per request per thread (flat is no contention) and the
//! requests per second of all threads together.
//!
//! `cargo bench -p stampede-agent --bench recorder` (about a minute; RECORDS=N per thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stampede_agent::runner::Recorder;

fn request(rec: &Recorder, i: u64) {
    rec.with(0, |s| {
        s.counters_mut().sessions_planned += 1;
        s.record_start(1 + i % 7);
        s.counters_mut().requests_started += 1;
    });
    rec.with(0, |s| {
        s.counters_mut().count_status(200);
        s.record_success(0, 100 + i % 5_000, 90 + i % 4_000);
        s.counters_mut().sessions_completed += 1;
    });
}

/// Wall time per request on each of `threads` threads, and the requests per second of all.
fn run(stripes: usize, threads: usize, records: u64) -> (f64, f64) {
    let rec = Arc::new(Recorder::with_stripes(1, 1, stripes));
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (rec, done) = (rec.clone(), done.clone());
        std::thread::spawn(move || {
            let mut spare = vec![None];
            let mut total = 0u64;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                rec.swap(&mut spare);
                for s in spare.iter_mut().flatten() {
                    total += s.counters().requests_completed;
                    s.reset();
                }
            }
            rec.swap(&mut spare);
            total
                + spare
                    .iter()
                    .flatten()
                    .map(|s| s.counters().requests_completed)
                    .sum::<u64>()
        })
    };
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let rec = rec.clone();
            std::thread::spawn(move || {
                for i in 0..records {
                    request(&rec, i);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let wall = start.elapsed();
    done.store(true, Ordering::Relaxed);
    let counted = ticker.join().expect("ticker");
    assert_eq!(
        counted,
        records * threads as u64,
        "every request counted once"
    );
    let n = records as f64;
    (
        wall.as_nanos() as f64 / n,
        n * threads as f64 / wall.as_secs_f64(),
    )
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let records = std::env::var("RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000u64);
    println!("cores {cores}, {records} requests per thread, two records per request, medians of 5");
    println!("| threads | stripes | ns per request per thread | requests/s, all threads |");
    println!("|---|---|---|---|");
    for threads in 1..=cores {
        let mut figures = vec![Vec::new(); 2];
        // Alternated, so that neither setting has the warm cache or the cold one.
        for _ in 0..5 {
            for (i, stripes) in [1, cores].into_iter().enumerate() {
                figures[i].push(run(stripes, threads, records));
            }
        }
        for (i, stripes) in [1, cores].into_iter().enumerate() {
            let f = &mut figures[i];
            f.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (ns, rps) = f[f.len() / 2];
            println!("| {threads} | {stripes} | {ns:.1} | {:.2}M |", rps / 1e6);
        }
    }
}
