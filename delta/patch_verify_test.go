package delta

// Verify reads every tensor's indices and checks they ascend strictly and stay inside the
// tensor, as the apply does while it writes. Errors wrap ErrMalformed. (Tests: the apply
// checks the indices as it reads them.)
func (p *Patch) Verify() error {
	for _, t := range p.Plan.Tensors {
		c := p.newCursor(t)
		for {
			_, _, ok, err := c.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
		}
	}
	return nil
}
