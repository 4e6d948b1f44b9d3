//! The eval side, indexed once: task ids, normalised texts, and n-gram hashes.

use super::{Hasher, norm, norm_of, words_of};

/// The eval side, indexed.
pub struct EvalIndex {
    pub(super) n: usize,
    pub(super) hasher: Hasher,
    /// Eval rows read.
    pub n_rows: u64,
    /// Eval rows with a recorded task id.
    pub n_with_task: u64,
    /// Recorded eval task ids.
    pub tasks: foldhash::HashSet<String>,
    /// Normalised eval texts, by text id.
    pub(super) norms: foldhash::HashMap<String, u32>,
    /// The texts, by id (normalised).
    pub texts: Vec<String>,
    /// N-gram hash → the text ids holding it (ascending, no repeats).
    pub(super) ngrams: foldhash::HashMap<u64, Vec<u32>>,
    /// Eval prompts for the semantic rule: (prompt, its task id), one per normalised prompt.
    pub prompts: Vec<(String, Option<String>)>,
    pub(super) prompt_norms: foldhash::HashSet<String>,
}

impl EvalIndex {
    /// An empty index of `n`-grams.
    pub fn new(n: usize) -> Self {
        Self {
            n,
            hasher: Hasher::new(),
            n_rows: 0,
            n_with_task: 0,
            tasks: foldhash::HashSet::default(),
            norms: foldhash::HashMap::default(),
            texts: Vec::new(),
            ngrams: foldhash::HashMap::default(),
            prompts: Vec::new(),
            prompt_norms: foldhash::HashSet::default(),
        }
    }

    /// Adds one eval row: its recorded task id, its prompt and any further texts (answer,
    /// reference). Returns whether its prompt is new to the semantic rule's prompts.
    pub fn add(&mut self, task: Option<&str>, prompt: &str, more: &[String]) -> bool {
        let mut new_prompt = false;
        self.n_rows += 1;
        if let Some(t) = task {
            self.n_with_task += 1;
            self.tasks.insert(t.to_owned());
        }
        if !prompt.trim().is_empty() {
            let key = norm(prompt);
            if self.prompt_norms.insert(key) {
                self.prompts
                    .push((prompt.to_owned(), task.map(str::to_owned)));
                new_prompt = true;
            }
        }
        for text in std::iter::once(prompt).chain(more.iter().map(String::as_str)) {
            self.add_lower(&text.to_lowercase());
        }
        new_prompt
    }

    /// Adds one eval text already normalised (an entry of another index's `texts`): as `add`
    /// does with the text it came from, since normalising keeps the words and lowercase text
    /// stays as it is.
    pub(super) fn add_normalized(&mut self, text: &str) {
        self.add_lower(text);
    }

    /// Adds one lowercased eval text, unless it has no words or is already indexed.
    fn add_lower(&mut self, lower: &str) {
        let w = words_of(lower);
        if w.is_empty() {
            return;
        }
        let key = norm_of(lower);
        if self.norms.contains_key(&key) {
            return;
        }
        let id = u32::try_from(self.texts.len()).unwrap_or(u32::MAX);
        self.norms.insert(key.clone(), id);
        self.texts.push(key);
        for h in self.hasher.windows(&w, self.n) {
            let ids = self.ngrams.entry(h).or_default();
            if ids.last() != Some(&id) {
                ids.push(id);
            }
        }
    }
}
