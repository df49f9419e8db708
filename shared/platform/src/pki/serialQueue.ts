/**
 * Runs async tasks one at a time, in call order. A YubiKey is one device: a second signature must wait
 * for the first (and for its touch), not interleave with it. A failing task does not stop the queue.
 */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private waiting = 0;

  /** Tasks queued or running. */
  get pending(): number {
    return this.waiting;
  }

  run<T>(task: () => Promise<T>): Promise<T> {
    this.waiting++;
    const result = this.tail.then(() => task()); // `tail` never rejects
    const settle = (): void => {
      this.waiting--;
    };
    this.tail = result.then(settle, settle);
    return result;
  }
}
