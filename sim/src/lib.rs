//! A fleet of up to thousands of hosts sharing one global quota, simulated
//! in one process on a fake clock with the real logic: each host is a real
//! flowctrl table whose task pulls from the store URL `sim:`, which runs the
//! crate's own pull script in a Lua 5.1 interpreter over a model of Redis
//! (`lua`, `model`). Nothing of the grant rule or the chunk logic is copied
//! here; the seams are the library's feature `sim` (a clock this process
//! sets, and the `sim:` store).

pub mod fleet;
pub mod keyed;
pub mod lua;
pub mod model;
pub mod report;
pub mod scenario;

pub use flowctrl::Result;
