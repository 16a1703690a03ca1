package store

// Byte shuffling puts byte j of every element together: for bf16 weights all the high bytes
// (sign and exponent, very repetitive) come first and compress well, the low bytes (mantissa,
// nearly random) after. A chunk of n elements of width w becomes w planes of n bytes.

// shuffleBytes writes src shuffled at width into dst (len(dst) == len(src), a multiple of
// width). Fast paths for the common widths; shuffleReference is the definition.
func shuffleBytes(dst, src []byte, width int) {
	n := len(src) / width
	switch width {
	case 1:
		copy(dst, src)
	case 2:
		lo, hi := dst[:n], dst[n:2*n]
		src = src[:2*n]
		for i := range lo {
			lo[i] = src[2*i]
			hi[i] = src[2*i+1]
		}
	case 4:
		p0, p1, p2, p3 := dst[:n], dst[n:2*n], dst[2*n:3*n], dst[3*n:4*n]
		src = src[:4*n]
		for i := range p0 {
			e := src[4*i : 4*i+4]
			p0[i], p1[i], p2[i], p3[i] = e[0], e[1], e[2], e[3]
		}
	default:
		shuffleReference(dst, src, width)
	}
}

// unshuffleBytes is the inverse of shuffleBytes.
func unshuffleBytes(dst, src []byte, width int) {
	n := len(src) / width
	switch width {
	case 1:
		copy(dst, src)
	case 2:
		lo, hi := src[:n], src[n:2*n]
		dst = dst[:2*n]
		for i := range lo {
			dst[2*i] = lo[i]
			dst[2*i+1] = hi[i]
		}
	case 4:
		p0, p1, p2, p3 := src[:n], src[n:2*n], src[2*n:3*n], src[3*n:4*n]
		dst = dst[:4*n]
		for i := range p0 {
			e := dst[4*i : 4*i+4]
			e[0], e[1], e[2], e[3] = p0[i], p1[i], p2[i], p3[i]
		}
	default:
		unshuffleReference(dst, src, width)
	}
}

// shuffleReference is the definition of the shuffle: byte j of element i goes to j*n + i.
func shuffleReference(dst, src []byte, width int) {
	n := len(src) / width
	for i := 0; i < n; i++ {
		for j := 0; j < width; j++ {
			dst[j*n+i] = src[i*width+j]
		}
	}
}

// unshuffleReference is the definition of the inverse.
func unshuffleReference(dst, src []byte, width int) {
	n := len(src) / width
	for i := 0; i < n; i++ {
		for j := 0; j < width; j++ {
			dst[i*width+j] = src[j*n+i]
		}
	}
}
