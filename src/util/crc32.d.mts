/** crc32(bytes, previous = 0): the CRC-32 of `bytes`, continuing from `previous`. */
export declare const crc32: (data: Uint8Array | string, value?: number) => number;
