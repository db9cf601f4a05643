// Allocates a few MB through the program's own global allocator, then sleeps until killed.
// Usage: embedded-{mimalloc,jemalloc} [SECONDS]  (default: 3600)
fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3600);
    // Many small blocks of varied sizes, kept alive: the heap the embedded allocator serves.
    let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![(i % 251) as u8; 64 + (i * 37) % 400]).collect();
    let total: usize = blocks.iter().map(|b| b.len()).sum();
    println!("ready {} bytes in {} blocks", total, blocks.len());
    std::thread::sleep(std::time::Duration::from_secs(seconds));
    drop(blocks);
}
