//! Choose the rows worth training on, then turn them into OpenAI chat lines: the library under
//! `wai select --mode sft` and `wai export --format openai`.
//!
//! ```sh
//! cargo run --example select_then_export
//! ```

#![allow(clippy::print_stdout, reason = "an example prints what it found")]

use wai::stages::export::{self, ExportStage, GROUP_KEYS, Groups};
use wai::stages::select::{self, SelectStage, Truncated};
use wai::stages::{Session, run};

#[tokio::main]
async fn main() -> wai::Result<()> {
    let session = Session::new()?;
    let rows = wai::testing::generated(20_000, 5)?;

    // Select: one passing demonstration per ask, every behaviour before a repeat.
    let options = select::Options {
        target: 500,
        band: (0.2, 0.8),
        truncated: Truncated::Drop,
        has_tools: true,
        min_reward: 1.0,
    };
    let inputs = select::Inputs {
        rows,
        mode: select::Mode::Sft,
    };
    let selection = run::<SelectStage>(&session, inputs, &options).await?;
    println!("{selection}");

    // Export: group fields over all rows first, then the rows batch by batch into lines.
    let chosen = selection.rows;
    let scope = session.scope_with(&[("rows", wai::testing::frame(&session, chosen.clone())?)])?;
    let groups = Groups::of_keys(&scope.sql(GROUP_KEYS).await?.collect().await?)?;
    // The lines go to memory here; `wai export` writes them to a file, whole or not at all.
    let out = std::rc::Rc::new(std::cell::RefCell::new(Vec::<u8>::new()));
    let sink = std::rc::Rc::clone(&out);
    let inputs = export::Inputs {
        groups,
        rows: Box::new(move |push| chosen.into_iter().try_for_each(push)),
        lines: Box::new(move |chunk, _meta| {
            sink.borrow_mut().extend_from_slice(&chunk);
            Ok(())
        }),
    };
    let report = run::<ExportStage>(&session, inputs, &export::Options::default()).await?;
    println!("{report}");
    let lines = out.borrow();
    let text = String::from_utf8_lossy(&lines);
    let first = text.lines().next().unwrap_or_default();
    println!(
        "{} lines; the first begins {}",
        text.lines().count(),
        first.chars().take(120).collect::<String>()
    );
    Ok(())
}
