//! Operators over rows. Each stage plans a `DataFrame` and reports what it found; stages know
//! nothing about files, the command line or progress bars. [`stage`] is the contract every
//! stage keeps: [`Stage`], its [`Options`], the [`Session`] it runs in, and [`run`].

mod cells;
pub mod compare;
mod conversation;
pub mod coverage;
pub mod decontaminate;
pub mod embed;
pub mod ending;
pub mod export;
pub mod grade;
pub mod hack_scan;
pub mod holdout;
pub mod init_evals;
pub mod judge_trust;
pub mod labels;
pub mod leak;
pub mod markers;
pub mod messages;
pub mod normalize;
pub mod pass_at;
pub mod select;
pub mod simulate;
pub mod stage;
pub mod task_key;
pub mod terms;
pub mod udf;
pub mod variance;

pub use stage::{Options, Session, Stage, run};
