#!/usr/bin/env node
// Runs the TypeScript CLI through tsx, whatever the caller's working directory.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
