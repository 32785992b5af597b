//! What the fuzz targets share.

use std::sync::{
    LazyLock, Mutex,
    mpsc::{Sender, channel},
};

/// A part of an input, what to run on it, and where to say it is done.
type Job = (Vec<u8>, fn(&[u8]), Sender<()>);

/// Two threads that live as long as the fuzzer: threads started for each input leave the
/// standard library's bookkeeping of them to be freed after the input, which LeakSanitizer
/// reports as the input's leak.
static WORKERS: LazyLock<Vec<Mutex<Sender<Job>>>> = LazyLock::new(|| {
    (0..2)
        .map(|_| {
            let (jobs, incoming) = channel::<Job>();
            std::thread::spawn(move || {
                for (part, run, done) in incoming {
                    run(&part);
                    let _ = done.send(());
                }
            });
            Mutex::new(jobs)
        })
        .collect()
});

/// Runs `run` on parts of `data` on one to three threads at once (the first byte says how
/// many), as programs that load fakegpu's libraries call them from several threads.
pub fn in_threads(data: &[u8], run: fn(&[u8])) {
    let threads = 1 + (data.first().copied().unwrap_or(0) % 3) as usize;
    let rest = data.get(1..).unwrap_or_default();
    let chunk = rest.len().div_ceil(threads).max(1);
    let mut parts = rest.chunks(chunk);
    let here = parts.next().unwrap_or_default();
    let (done, finished) = channel();
    let mut sent = 0;
    for (part, worker) in parts.zip(WORKERS.iter()) {
        let jobs = worker.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.send((part.to_vec(), run, done.clone())).is_ok() {
            sent += 1;
        }
    }
    run(here);
    for _ in 0..sent {
        let _ = finished.recv();
    }
}
