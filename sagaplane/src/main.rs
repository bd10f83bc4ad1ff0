//! `sagaplane`: the command line for people: keys, signed plans and cards, validation.

mod a2a;
mod commands;
mod demo;
mod executor_api;
mod failure;
mod input;
mod output;

use std::process::ExitCode;

use clap::Parser;

use crate::commands::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("sagaplane: {}", failure.message.replace('\n', " "));
            ExitCode::from(failure.status)
        }
    }
}
