-- One view per trace table over the run's Parquet files.
-- Set the run folder first, then read this file:
--   SET VARIABLE run_dir = 'runs/20261129T181500Z';
--   .read analysis/views.sql
-- Every table must have at least one file here. analysis.views.connect() also
-- creates an empty view with the right columns for a table the run never wrote.
-- union_by_name: files written by older schema versions still read.

CREATE OR REPLACE VIEW board AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/board/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW messages AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/messages/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW forge AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/forge/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW turns AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/turns/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW tool_calls AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/tool_calls/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW usage AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/usage/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW deliveries AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/deliveries/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW scores AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/scores/*.parquet', union_by_name = true);

CREATE OR REPLACE VIEW lifecycle AS
SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/lifecycle/*.parquet', union_by_name = true);
