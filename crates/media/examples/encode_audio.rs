//! Time an audio encoder (Gemma 3n or Gemma 4) on one clip: decoding, features and the
//! tower, separately, over a few runs.
//!
//!     cargo run --release -p hearth-media --example encode_audio -- CHECKPOINT_DIR|MMPROJ CLIP [THREADS] [RUNS]

use hearth_media::{AudioTower, Clip, LogMel};
use std::sync::Arc;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (dir, clip) = match (args.get(1), args.get(2)) {
        (Some(d), Some(c)) => (d, c),
        _ => return Err("usage: encode_audio CHECKPOINT_DIR CLIP [THREADS] [RUNS]".into()),
    };
    let threads: usize = args.get(3).map_or(Ok(2), |s| s.parse())?;
    let runs: usize = args.get(4).map_or(Ok(3), |s| s.parse())?;
    let start = Instant::now();
    let path = std::path::Path::new(dir);
    let tower = if path.is_dir() {
        let gguf = hf::convert_audio_dir(path)?.ok_or("no audio tower")?;
        AudioTower::from_gguf(Arc::new(gguf::GgufFile::from_bytes(gguf.to_bytes())?))?
    } else {
        // llama.cpp's mmproj file.
        AudioTower::load(path)?
    };
    println!(
        "loaded in {:.2} s: {tower:?}",
        start.elapsed().as_secs_f64()
    );
    let bytes = std::fs::read(clip)?;
    let pool = threads::ThreadPool::new(threads);
    for run in 0..runs {
        let t0 = Instant::now();
        let audio = Clip::decode(&bytes)?;
        let t1 = Instant::now();
        let mel = LogMel::compute(&audio, &tower.mel_settings())?;
        let t2 = Instant::now();
        let out = tower.encode(&pool, &mel)?;
        let t3 = Instant::now();
        println!(
            "run {run}: {:.1} s of audio, {} frames -> {} tokens from the clip; decode {:.3} s, features {:.3} s, encoder {:.2} s ({threads} threads)",
            audio.seconds(),
            mel.frames,
            out.from_clip,
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64(),
            (t3 - t2).as_secs_f64()
        );
    }
    Ok(())
}
